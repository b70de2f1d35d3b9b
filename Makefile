# hipObject: the two commands of the README are `make demo` (the main job: a real RDMA PUT/GET)
# and `make test` (every test). Each target calls a script that its area owns.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all build deps test unit ctest lint loom fuzz-short e2e demo clean install uninstall examples

# Where `make install` puts the library, header, pkg-config/CMake files and the two binaries.
PREFIX ?= /usr/local
DESTDIR ?=

all: build

# System packages the build and tests need (idempotent, Debian packages only).
deps:
	scripts/install-deps

build: deps
	$(CARGO) build --release --workspace

unit: deps
	$(CARGO) test --workspace

ctest: build
	tests/c/run

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p hipobj --features sim-gpu --all-targets -- -D warnings

loom:
	loom-tests/run

fuzz-short:
	fuzz/run-short

e2e: build
	scripts/build-e2e
	tests/vm/e2e

test: unit ctest lint loom fuzz-short e2e

demo: build
	scripts/build-e2e
	scripts/demo

install: build
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" scripts/install

uninstall:
	PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" scripts/install --uninstall

# examples/get-object and examples/put-object (libcurl), linked against the build tree.
examples: build
	scripts/build-examples

clean:
	$(CARGO) clean
