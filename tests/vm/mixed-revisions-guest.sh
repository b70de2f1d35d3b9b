#!/bin/bash
# Guest half of tests/vm/mixed-revisions (docs/protocol.md 11.3, 12.5): clients and servers of this
# protocol revision and the previous one against each other in one lane boot, plus both of this
# revision.
#   HIPOBJ_OLD_DIR = a checkout of the previous revision with scripts/build-release run in it;
#   HIPOBJ_OLD_REV = its revision number (for the labels), this one is the next.
# 1. the old library (libhipobj.so of OLD, through the C + libcurl program) against this server,
#    and this library against the old server: PUT, GET, 40 warm GETs, a GET refused 404 and the
#    GET after it (one request when both sides keep the pairing, revision 5; two otherwise);
# 2. both of this revision, for comparison (remote invalidations counted by the server), asking
#    for the revision-5 count;
# 3. this client (tests/e2e_rdma.rs, unchanged) against the old server;
# 4. the end-to-end check of a token GET across revisions 5 and 6 (docs/protocol.md 16.6):
#    examples/get-object of each build against each server: no failure, the bytes equal; a
#    revision-5 client of a revision-6 server says "unchecked", the others "verified".
# This revision's client asks for remote invalidation only when told (HIPOBJ_REMOTE_INV, off by
# default: rxe of Linux 6.1 can panic on it, src/env.rs); this test is about that path too.
export HIPOBJ_REMOTE_INV=1
set -uo pipefail
OLD=${HIPOBJ_OLD_DIR:?set HIPOBJ_OLD_DIR to a checkout of the previous revision with a release build}
OLD_REV=${HIPOBJ_OLD_REV:-4}; NEW_REV=$((OLD_REV + 1))
set -- $HIPOBJ_VM_DEVICES
CLIENT_DEV=${1:-rxe0}; SERVER_DEV=${2:-$CLIENT_DEV}
ADDR=$(echo "${HIPOBJ_VM_ADDRS:-}" | tr ' ' '\n' | sed -n "s/^$SERVER_DEV=//p")
ADDR=${ADDR:-127.0.0.1}
NEW_SERVER=$PWD/target/release/hipobj-server
OLD_SERVER=$OLD/target/release/hipobj-server
rc=0
# sign_curl ARGS...: curl with its own SigV4 as curl-e2e; the keys reach it on its standard input
# (-K -), never on its command line (ps shows that).
sign_curl() {
  printf 'user = "curl-e2e:curl-e2e-secret-key"\n' |
    curl -K - -sf --aws-sigv4 aws:amz:us-east-1:s3 -H x-amz-content-sha256:UNSIGNED-PAYLOAD "$@"
}
# A library directory whose libhipobj.so.0 is the given build's libhipobj.so.
libdir() { local d; d=$(mktemp -d /tmp/hipobj-lib.XXXXXX); ln -s "$1" "$d/libhipobj.so.0"; ln -s "$1" "$d/libhipobj.so"; echo "$d"; }
NEW_LIB=$(libdir "$PWD/target/release/libhipobj.so")
OLD_LIB=$(libdir "$OLD/target/release/libhipobj.so")

# start_server SERVER_BIN PORT: a server of that build with one identity (curl-e2e), its data
# in a fresh directory ($data, with $data.log and $data.credentials beside it; $spid its pid).
start_server() {
  data=$(mktemp -d /tmp/hipobj-mixed.XXXXXX)
  (umask 077; printf '# mixed\ncurl-e2e curl-e2e-secret-key\n' > "$data.credentials")
  "$1" --listen "$ADDR:$2" --data-dir "$data" --device "$SERVER_DEV" \
    --credentials "$data.credentials" > "$data.log" 2>&1 &
  spid=$!
  local i=0
  until grep -q "listening on" "$data.log" 2>/dev/null; do
    i=$((i+1)); [ $i -lt 600 ] || { echo "server did not start"; cat "$data.log"; return 1; }; sleep 0.1
  done
}

# curl_case LABEL SERVER_BIN LIBDIR [KEPT]: curl_e2e (PUT + GET of 4 MiB and the program's checks)
# with the library of LIBDIR against SERVER_BIN (KEPT=1: the GET after a 404 must take one
# request); prints the server's counters.
curl_case() {
  local label=$1 server=$2 lib=$3 kept=${4:-0} data spid port=19481
  start_server "$server" $port || { rc=1; return; }
  export HIPOBJ_S3_USER=curl-e2e:curl-e2e-secret-key
  sign_curl -X PUT "http://$ADDR:$port/cbkt" > /dev/null
  echo "== $label"
  # The old library runs the old build's program when there is one (a real old client).
  local prog=target/e2e/curl_e2e
  [ "$lib" = "$OLD_LIB" ] && [ -x "$OLD/target/e2e/curl_e2e" ] && prog=$OLD/target/e2e/curl_e2e
  if HIPOBJ_EXPECT_KEPT_PAIRING=$kept LD_LIBRARY_PATH=$lib "$prog" "http://$ADDR:$port" "$CLIENT_DEV" 4194304; then
    echo "-- $label: PASS"
  else
    echo "-- $label: FAIL"; rc=1
  fi
  local stats
  stats=$(sign_curl "http://$ADDR:$port/_hipobj/stats" || true)
  echo "-- $label: server stats: $(echo "$stats" | grep -o '"\(rdma_gets\|rdma_puts\|pairings_created\|remote_invalidations\|pairings_failed\|replies_404\|replies_500\)":[0-9]*' | tr '\n' ' ')"
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  rm -rf "$data" "$data.log" "$data.credentials"
}

curl_case "revision-$OLD_REV library -> revision-$NEW_REV server" "$NEW_SERVER" "$OLD_LIB"
curl_case "revision-$NEW_REV library -> revision-$OLD_REV server" "$OLD_SERVER" "$NEW_LIB"
curl_case "revision-$NEW_REV library -> revision-$NEW_REV server" "$NEW_SERVER" "$NEW_LIB" 1

# checksum_case LABEL SERVER_BIN EXAMPLES_DIR WANT: put-object then get-object (each build's own
# examples, linked to its own library) of 3 MB; WANT is the word get-object must print.
checksum_case() {
  local label=$1 server=$2 ex=$3 want=$4 data spid port=19482 out
  start_server "$server" $port || { rc=1; return; }
  sign_curl -X PUT "http://$ADDR:$port/xbkt" > /dev/null
  head -c 3000001 /dev/urandom > "$data.in"
  echo "== $label"
  export AWS_ENDPOINT_URL=http://$ADDR:$port HIPOBJ_NIC=$CLIENT_DEV AWS_ACCESS_KEY_ID=curl-e2e \
    AWS_SECRET_ACCESS_KEY=curl-e2e-secret-key AWS_REGION=us-east-1 HIPOBJ_TRANSPORT=rdma
  if "$ex/put-object" xbkt obj "$data.in" >/dev/null 2>&1 &&
     out=$("$ex/get-object" xbkt obj 3000001 "$data.out" 2>&1) && cmp -s "$data.in" "$data.out" &&
     grep -q "$want" <<<"$out"; then
    echo "-- $label: PASS ($(grep 'GET s3://' <<<"$out"))"
  else
    echo "-- $label: FAIL (want '$want'): $out"; rc=1
  fi
  unset AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY HIPOBJ_TRANSPORT
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  rm -rf "$data" "$data.log" "$data.credentials" "$data.in" "$data.out"
}

if [ -x "$OLD/target/examples/get-object" ] && [ -x target/examples/get-object ]; then
  checksum_case "revision-$OLD_REV get-object -> revision-$NEW_REV server" "$NEW_SERVER" "$OLD/target/examples" "unchecked"
  checksum_case "revision-$NEW_REV get-object -> revision-$OLD_REV server" "$OLD_SERVER" "$PWD/target/examples" "verified"
  checksum_case "revision-$NEW_REV get-object -> revision-$NEW_REV server" "$NEW_SERVER" "$PWD/target/examples" "verified"
else
  echo "-- checksum cases: FAIL (run scripts/build-examples in both trees)"; rc=1
fi

if [ -n "${HIPOBJ_MIXED_E2E:-}" ]; then
  echo "== tests/e2e_rdma.rs (revision-$NEW_REV client) -> revision-$OLD_REV server"
  if HIPOBJ_SERVER_BIN=$OLD_SERVER "$HIPOBJ_MIXED_E2E" --include-ignored --test-threads=1 \
      ${HIPOBJ_MIXED_FILTER:-}; then
    echo "-- e2e_rdma -> revision-$OLD_REV server: PASS"
  else
    echo "-- e2e_rdma -> revision-$OLD_REV server: FAIL"; rc=1
  fi
fi
exit $rc
