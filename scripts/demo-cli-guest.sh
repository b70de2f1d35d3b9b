#!/bin/bash
# The hipObject part of `make demo` (run by scripts/demo-guest.sh in the lane, same boot as the
# perftest baseline): hipobj info, hipobj cp of 64 MiB each way over RDMA with a byte check, and
# hipobj bench with the perftest figures of this boot (W = ib_write_bw, R = ib_read_bw MB/s, from
# the caller). A command that fails transiently (exit 1: a transfer failed, 7: an HTTP 5xx or an
# unreachable server) is run again, up to 3 attempts with a full-jitter backoff (the standard-mode
# rule that `hipobj bench` applies to each of its operations); the last line counts the retries
# and the lasting failures: "demo: retried N, failed F". Exit 0 only when F is 0.
# HIPOBJ_CLI_BIN / HIPOBJ_SERVER_BIN choose the binaries (default: scripts/build-release's).
set -uo pipefail
W=${W:-} R=${R:-}
RETRIED=0 FAILED=0
HIPOBJ=${HIPOBJ_CLI_BIN:-$PWD/target/release/hipobj}
export HIPOBJ_SERVER_BIN=${HIPOBJ_SERVER_BIN:-$PWD/target/release/hipobj-server}

# attempt CMD...: CMD, retried while it fails transiently; counts retries and lasting failures.
attempt() {
  local try rc
  for try in 1 2 3; do
    "$@"
    rc=$?
    case $rc in
      0) return 0 ;;
      1|7) [ "$try" = 3 ] && break
           echo "demo: '$*' exited $rc (transient), retrying" >&2
           RETRIED=$((RETRIED + 1))
           sleep "$(awk -v n="$try" -v r="$RANDOM" 'BEGIN { printf "%.3f", r / 32768 * 0.1 * 2 ^ n }')" ;;
      *) break ;;
    esac
  done
  echo "demo: '$*' failed (exit $rc)" >&2
  FAILED=$((FAILED + 1))
  return "$rc"
}

echo "=== hipobj command line: info, cp each way (64 MiB, bytes checked), bench (same boot as perftest above)"
. tests/support/server.sh
# No secret on any command line while the demo runs (issue 52; checked at the end).
. tests/support/argv-secrets.sh
argv_watch_start
set -- $HIPOBJ_VM_DEVICES
CLI_DEV=${1:-rxe0} SRV_DEV=${2:-${1:-rxe0}}
start_hipobj_server "$SRV_DEV" || { echo "demo: hipobj-server did not start"; echo "demo: retried 0, failed 1"; exit 1; }
export AWS_ENDPOINT_URL=$HIPOBJ_SRV_URL HIPOBJ_NIC=$CLI_DEV
export AWS_ACCESS_KEY_ID=$HIPOBJ_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$HIPOBJ_TEST_SECRET_KEY
echo "\$ hipobj info"
attempt "$HIPOBJ" info
attempt "$HIPOBJ" mb s3://demo >/dev/null
head -c $((64 << 20)) /dev/urandom > /tmp/demo-in
echo "\$ hipobj cp --transport rdma /tmp/demo-in s3://demo/obj"
attempt "$HIPOBJ" cp --transport rdma /tmp/demo-in s3://demo/obj
echo "\$ hipobj cp --transport rdma s3://demo/obj /tmp/demo-out"
attempt "$HIPOBJ" cp --transport rdma s3://demo/obj /tmp/demo-out
if cmp -s /tmp/demo-in /tmp/demo-out; then
  echo "bytes equal: $(stat -c %s /tmp/demo-out) bytes"
else
  echo "BYTES DIFFER"
  FAILED=$((FAILED + 1))
fi
rm -f /tmp/demo-in /tmp/demo-out
echo "\$ hipobj bench --sizes 4K,1M,16M --concurrency 1,4 --iterations 4 --perftest-write ${W:--} --perftest-read ${R:--}"
# bench retries each operation itself and prints "retried N, failed M" for them; running it again
# would repeat operations that already succeeded, so a failed bench is not run again.
"$HIPOBJ" bench --sizes 4K,1M,16M --concurrency 1,4 --iterations 4 ${W:+--perftest-write "$W"} \
  ${R:+--perftest-read "$R"} | tee /tmp/demo-bench.txt
rc=${PIPESTATUS[0]}
read -r b_retried b_failed < <(sed -n 's/^hipobj bench: .*, retried \([0-9]*\), failed \([0-9]*\).*/\1 \2/p' /tmp/demo-bench.txt)
RETRIED=$((RETRIED + ${b_retried:-0}))
if [ -z "${b_failed:-}" ]; then
  echo "demo: hipobj bench exited $rc without its count" >&2
  FAILED=$((FAILED + 1))
else
  FAILED=$((FAILED + b_failed))
  [ "$rc" = 0 ] || [ "$b_failed" -gt 0 ] || FAILED=$((FAILED + 1))
fi
verdict=$(argv_watch_verdict) || FAILED=$((FAILED + 1))
echo "demo: $verdict"
if [ "$FAILED" != 0 ]; then
  echo "demo: hipobj-server's last warnings and errors ($HIPOBJ_SRV_LOG):"
  grep -E "WARN|ERROR" "$HIPOBJ_SRV_LOG" | tail -n 20 | cut -c1-300
fi
echo "demo: retried $RETRIED, failed $FAILED (retried: transient failures a retry fixed; failed: lasting ones)"
[ "$FAILED" = 0 ]
