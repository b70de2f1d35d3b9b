#!/bin/bash
# Runs tests/rdma_e2e.rs (real RDMA, ignored by default) inside the Soft-RoCE VM of
# shared/softroce, against rxe0 on the guest's lo. Usage (from the repository root):
#   server/tests/vm/run-rdma-e2e.sh [SOFTROCE_DIR]     (default: ../shared/softroce)
# WORK (default /tmp/softroce-server) holds the guest kernel and initramfs; RELEASE=1 builds
# and runs optimised binaries (the transfer times printed are more telling then).
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
SOFTROCE=$(readlink -f "${1:-$ROOT/../shared/softroce}")
export WORK=${WORK:-/tmp/softroce-server}
mkdir -p "$WORK"
PROFILE=${RELEASE:+--release}
cargo build $PROFILE -p hipobj-server --bin hipobj-server
TB=$(cargo test $PROFILE -p hipobj-server --test rdma_e2e --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*rdma_e2e[^"]*\)".*/\1/p' | tail -1)
[ -x "$TB" ] || { echo "cannot find the rdma_e2e test binary" >&2; exit 1; }
[ -f "$WORK/vmlinuz" ] || { "$SOFTROCE/setup-host.sh"; "$SOFTROCE/build-initramfs.sh"; }
cat > "$WORK/rdma-e2e-guest.sh" <<GUEST
#!/bin/sh
. /softroce/guest-setup-rdma.sh
ulimit -l unlimited
chroot /host sh -c "cd $ROOT/server && HIPOBJ_TEST_RDMA_DEVICE=rxe0 $TB --ignored --test-threads=1 --nocapture"
GUEST
"$SOFTROCE/run-vm.sh" --hostroot --share "$ROOT" --timeout 600 --script "$WORK/rdma-e2e-guest.sh"
