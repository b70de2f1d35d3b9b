#!/bin/bash
# The command-line part of `make demo` (run by scripts/demo-guest.sh in the lane, same boot as the
# perftest baseline): hipobj info, hipobj cp of 64 MiB each way with a byte check, hipobj bench
# with the perftest figures of this boot (W = ib_write_bw, R = ib_read_bw MB/s, from the caller).
# HIPOBJ_CLI_BIN / HIPOBJ_SERVER_BIN choose the binaries (default: scripts/build-e2e's).
set -uo pipefail
rc=0
W=${W:-} R=${R:-}
echo "=== hipobj command line: info, cp each way (64 MiB, bytes checked), bench (same boot as perftest above)"
. tests/support/server.sh
set -- $HIPOBJ_VM_DEVICES
CLI_DEV=${1:-rxe0} SRV_DEV=${2:-${1:-rxe0}}
HIPOBJ=${HIPOBJ_CLI_BIN:-$PWD/target/release/hipobj}
start_hipobj_server "$SRV_DEV" || exit 1
export AWS_ENDPOINT_URL=$HIPOBJ_SRV_URL HIPOBJ_NIC=$CLI_DEV
export AWS_ACCESS_KEY_ID=$HIPOBJ_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$HIPOBJ_TEST_SECRET_KEY
echo "\$ hipobj info"
"$HIPOBJ" info || rc=1
"$HIPOBJ" mb s3://demo >/dev/null || rc=1
head -c $((64 << 20)) /dev/urandom > /tmp/demo-in
echo "\$ hipobj cp /tmp/demo-in s3://demo/obj"
"$HIPOBJ" cp -q /tmp/demo-in s3://demo/obj || rc=1
echo "\$ hipobj cp s3://demo/obj /tmp/demo-out"
"$HIPOBJ" cp -q s3://demo/obj /tmp/demo-out || rc=1
if cmp -s /tmp/demo-in /tmp/demo-out; then echo "bytes equal: $(stat -c %s /tmp/demo-out) bytes"; else echo "BYTES DIFFER"; rc=1; fi
rm -f /tmp/demo-in /tmp/demo-out
echo "\$ hipobj bench --sizes 4K,1M,16M --concurrency 1,4 --iterations 4 --perftest-write ${W:--} --perftest-read ${R:--}"
"$HIPOBJ" bench --sizes 4K,1M,16M --concurrency 1,4 --iterations 4 ${W:+--perftest-write "$W"} ${R:+--perftest-read "$R"} || rc=1
exit $rc
