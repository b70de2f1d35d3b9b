# hipObject: the two commands of the README are `make demo` (the main job: a real RDMA PUT/GET)
# and `make test` (every test). Each target calls a script that its area owns.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all build deps test unit ctest lint loom fuzz-short frameworks nixl e2e-nixl e2e-ceph s3-conformance s3-conformance-full s3-conformance-gateway s3-conformance-ceph e2e demo bench-server python clean install uninstall examples

# Where `make install` puts the library, header, pkg-config/CMake files and the two binaries.
PREFIX ?= /usr/local
DESTDIR ?=

all: build

# System packages the build and tests need (idempotent, Debian packages only).
deps:
	scripts/install-deps

# The library, hipobj-server and the hipobj command line, in one cargo call (scripts/build-release).
build: deps
	CARGO=$(CARGO) scripts/build-release

# The gateway's host tests (server/tests/gateway_store.rs) run against s3s-fs (crates.io, cached
# in target/s3s-fs).
# One cargo call, so each test binary is built once: the simulated GPU (sim-gpu, a test double that
# only adds hipobj::hip::SimGpu) is on for the whole run. Then the server's unit tests of its
# test-only fault injection (cargo feature fault-injection, never in a shipped build).
unit: deps
	CARGO=$(CARGO) scripts/install-s3s-fs
	$(CARGO) test --workspace --features hipobj/sim-gpu
	$(CARGO) test -p hipobj-server --features fault-injection --lib -- inject

ctest: build
	tests/c/run

lint:
	scripts/check-docs
	benches/figures --check
	PYTHONDONTWRITEBYTECODE=1 python3 -m unittest tests/faults/test_schedule.py benches/test_cpu_per_gib.py
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p hipobj --features sim-gpu --all-targets -- -D warnings
	$(CARGO) clippy -p hipobj-cli --features hipobj/sim-gpu --all-targets -- -D warnings
	$(CARGO) clippy -p hipobj-server --features fault-injection --all-targets -- -D warnings

loom:
	loom-tests/run
	loom-tests/break-guards

fuzz-short:
	fuzz/run-short

# ceph/s3-tests test_s3.py (unmodified snapshot in ../shared/thirdparty) against hipobj-server:
# the case groups issue 11 names; fails when a case that passed in tests/s3/baseline-groups.txt
# does not pass (unless tests/s3/allow-groups.txt names it with its reason). The whole suite, with
# s3s-fs 0.14.1 beside it in the same run: make s3-conformance-full (about 40 min here).
s3-conformance:
	scripts/s3-conformance --ours-only --selection groups

s3-conformance-full:
	scripts/s3-conformance

# Issue 14: the whole test_s3.py against s3s-fs directly and through the gateway (--backend) in
# front of a second s3s-fs, at once, with the cases that differ (about 45 min here; not in test).
s3-conformance-gateway:
	scripts/s3-conformance --gateway

# Issue 23: the whole test_s3.py against Ceph RGW (scripts/ceph-cluster) directly and through the
# gateway in front of the same RGW, at once; fails when a case that passed in
# tests/s3/baseline-ceph.txt does not pass (allow-list tests/s3/allow-ceph.txt) (not in test).
s3-conformance-ceph:
	scripts/s3-conformance --ceph

# The Python package (python/): the abi3 wheel in target/wheels, installed in target/python-venv.
python: build
	scripts/build-python
	PYTHONDONTWRITEBYTECODE=1 target/python-venv/bin/python -m pytest -q -p no:cacheprovider python/tests/test_unit.py
	@# Its own process: it hides the RDMA devices from libibverbs before anything loads it.
	PYTHONDONTWRITEBYTECODE=1 HIPOBJ_SERVER_BIN=$(CURDIR)/target/release/hipobj-server target/python-venv/bin/python -m pytest -q -p no:cacheprovider python/tests/test_no_device.py

# The gateway's lane test needs s3s-fs (cached in target/s3s-fs); `make demo` does not.
e2e: build python nixl
	CARGO=$(CARGO) scripts/install-s3s-fs
	scripts/build-e2e
	tests/vm/e2e

# Issue 38: PyTorch DCP (2 ranks under torchrun), safetensors save and fsspec with pandas/pyarrow
# over RDMA, in their own lane boot (torch, pandas and pyarrow need SSE4.2; the main boot is a
# plain qemu64). Installs torch & co. into the project's venv once (scripts/python-deps --frameworks).
# First, on the host in its own process: the same layers without an RDMA device (issue 39).
frameworks: python
	scripts/python-deps --frameworks
	scripts/build-e2e
	PYTHONDONTWRITEBYTECODE=1 HIPOBJ_SERVER_BIN=$(CURDIR)/target/release/hipobj-server target/python-venv/bin/python -m pytest -q -p no:cacheprovider python/tests/frameworks/test_no_device_frameworks.py
	flock /tmp/hipobj-lane.lock tests/vm/run --timeout 2400 --mem 6G \
	  --cpu qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+pclmulqdq -- tests/vm/frameworks

# Issue 51: NIXL's backend plugin over the batch API (nixl/): the wheel nixl-cu12 1.4.0 into the
# project's venv once, libplugin_HIPOBJ.so into target/nixl/plugins, its symbols checked against the
# wheel's libnixl.so, and the wheel's NIXL loading it through NIXL_PLUGIN_DIR (host, no RDMA).
nixl: build
	nixl/build

# Its lane stage: NIXL's Python agent with HIPOBJ and, as the peer, NIXL's own OBJ plugin against
# hipobj-server over real verbs (nixl/tests/test_lane.py), in a boot of its own.
e2e-nixl: nixl
	scripts/build-e2e
	flock /tmp/hipobj-lane.lock tests/vm/run --timeout 900 --mem 6G -- tests/vm/nixl

# Every stage in order, timed (scripts/test prints each stage's time and the total).
test:
	MAKE="$(MAKE)" scripts/test

# Builds only what it runs (scripts/build-release: the library, the server, the command line).
# Issue 23: the gateway in front of Ceph RGW and TLS both ways, in its own lane boot with the CPU
# features Debian's Ceph needs. Not in `make test`: the cluster's start alone takes 130-250 s in
# the lane and the whole run 12-15 min (passed 2026-12-02, docs/gateway.md).
e2e-ceph:
	scripts/build-e2e --gateway
	flock /tmp/hipobj-lane.lock tests/vm/run --timeout 900 --mem 4G \
	  --cpu qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+pclmulqdq,+bmi1,+bmi2 -- bash tests/vm/gateway-ceph

demo: build
	scripts/demo

# hipobj-server data-path figures (issue 11) as ratios to perftest, in one lane boot.
bench-server: deps
	benches/server-datapath
install: build
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" scripts/install

uninstall:
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" scripts/install --uninstall

# examples/get-object and examples/put-object (libcurl), linked against the build tree.
examples: build
	scripts/build-examples

clean:
	$(CARGO) clean
