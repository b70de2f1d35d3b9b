#!/bin/bash
# Guest half of tests/vm/mixed-revisions (docs/protocol.md 11.3): clients and servers of protocol
# revisions 3 and 4 against each other in one lane boot, plus both of this revision.
#   REV3 = a checkout of revision 3 (f36d516) with scripts/build-release run in it.
# 1. this client (tests/e2e_rdma.rs, unchanged) against the revision-3 server;
# 2. the revision-3 library (libhipobj.so of REV3, through the C + libcurl program) against this
#    server, and this library against the revision-3 server;
# 3. both of this revision, for comparison (remote invalidations counted by the server).
# This revision's client asks for remote invalidation only when told (HIPOBJ_REMOTE_INV, off by
# default: rxe of Linux 6.1 can panic on it, src/env.rs); this test is about that path.
export HIPOBJ_REMOTE_INV=1
set -uo pipefail
REV3=${HIPOBJ_REV3_DIR:?set HIPOBJ_REV3_DIR to a revision-3 checkout with a release build}
set -- $HIPOBJ_VM_DEVICES
CLIENT_DEV=${1:-rxe0}; SERVER_DEV=${2:-$CLIENT_DEV}
ADDR=$(echo "${HIPOBJ_VM_ADDRS:-}" | tr ' ' '\n' | sed -n "s/^$SERVER_DEV=//p")
ADDR=${ADDR:-127.0.0.1}
NEW_SERVER=$PWD/target/release/hipobj-server
OLD_SERVER=$REV3/target/release/hipobj-server
rc=0
# A library directory whose libhipobj.so.0 is the given build's libhipobj.so.
libdir() { local d; d=$(mktemp -d /tmp/hipobj-lib.XXXXXX); ln -s "$1" "$d/libhipobj.so.0"; ln -s "$1" "$d/libhipobj.so"; echo "$d"; }
NEW_LIB=$(libdir "$PWD/target/release/libhipobj.so")
OLD_LIB=$(libdir "$REV3/target/release/libhipobj.so")

# curl_case LABEL SERVER_BIN LIBDIR: curl_e2e (PUT + GET of 4 MiB and the program's checks) with
# the library of LIBDIR against SERVER_BIN; prints the server's remote-invalidation count.
curl_case() {
  local label=$1 server=$2 lib=$3 data port=19481
  data=$(mktemp -d /tmp/hipobj-mixed.XXXXXX)
  printf '# mixed\ncurl-e2e curl-e2e-secret-key\n' > "$data.credentials"
  "$server" --listen "$ADDR:$port" --data-dir "$data" --device "$SERVER_DEV" \
    --credentials "$data.credentials" > "$data.log" 2>&1 &
  local spid=$! i=0
  until grep -q "listening on" "$data.log" 2>/dev/null; do
    i=$((i+1)); [ $i -lt 600 ] || { echo "server did not start"; cat "$data.log"; rc=1; return; }; sleep 0.1
  done
  export HIPOBJ_S3_USER=curl-e2e:curl-e2e-secret-key
  curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user $HIPOBJ_S3_USER \
    -H x-amz-content-sha256:UNSIGNED-PAYLOAD -X PUT "http://$ADDR:$port/cbkt" > /dev/null
  echo "== $label"
  if LD_LIBRARY_PATH=$lib target/e2e/curl_e2e "http://$ADDR:$port" "$CLIENT_DEV" 4194304; then
    echo "-- $label: PASS"
  else
    echo "-- $label: FAIL"; rc=1
  fi
  local stats
  stats=$(curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user $HIPOBJ_S3_USER \
    -H x-amz-content-sha256:UNSIGNED-PAYLOAD "http://$ADDR:$port/_hipobj/stats" || true)
  echo "-- $label: server stats: $(echo "$stats" | grep -o '"\(rdma_gets\|rdma_puts\|pairings_created\|remote_invalidations\|replies_500\)":[0-9]*' | tr '\n' ' ')"
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  rm -rf "$data" "$data.log" "$data.credentials"
}

curl_case "revision-3 library -> revision-4 server" "$NEW_SERVER" "$OLD_LIB"
curl_case "revision-4 library -> revision-3 server" "$OLD_SERVER" "$NEW_LIB"
curl_case "revision-4 library -> revision-4 server" "$NEW_SERVER" "$NEW_LIB"

if [ -n "${HIPOBJ_MIXED_E2E:-}" ]; then
  echo "== tests/e2e_rdma.rs (revision 4 client) -> revision-3 server"
  if HIPOBJ_SERVER_BIN=$OLD_SERVER "$HIPOBJ_MIXED_E2E" --include-ignored --test-threads=1 \
      ${HIPOBJ_MIXED_FILTER:-}; then
    echo "-- e2e_rdma -> revision-3 server: PASS"
  else
    echo "-- e2e_rdma -> revision-3 server: FAIL"; rc=1
  fi
fi
exit $rc
