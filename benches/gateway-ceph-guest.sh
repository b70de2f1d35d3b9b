#!/bin/bash
# Guest half of benches/gateway-ceph (see there): the Ceph cluster, hipobj-server as a gateway in
# front of its RGW on the second rxe device, the command line on the first; ROUNDS rounds of
# `hipobj bench` (RDMA through the gateway, HTTP straight to RGW), then the summary.
set -uo pipefail
ROUNDS=${1:-1}
. tests/support/server.sh
set -- $HIPOBJ_VM_DEVICES
CLI_DEV=${1:-rxe0} SRV_DEV=${2:-${1:-rxe0}}
HIPOBJ=${HIPOBJ_CLI_BIN:-$PWD/target/release/hipobj}
export HIPOBJ_SERVER_BIN=${HIPOBJ_SERVER_BIN:-$PWD/target/release/hipobj-server}
export HIPOBJ_CEPH_DIR=/tmp/hipobj-ceph
trap 'stop_hipobj_servers; scripts/ceph-cluster stop' EXIT
t0=$(date +%s)
scripts/ceph-cluster start || exit 1
echo "cluster up in $(($(date +%s) - t0)) s"
eval "$(scripts/ceph-cluster env)"
# The benchmark's identity as an RGW user; the gateway signs as the requester with the same keys.
radosgw-admin -c "$HIPOBJ_CEPH_CONF" user create --uid=bench --display-name=bench \
  --access-key="$HIPOBJ_TEST_ACCESS_KEY" --secret="$HIPOBJ_TEST_SECRET_KEY" >/dev/null || exit 1
# The emulated lane under host load stalls for seconds: the watchdog and rate deadlines of the
# gateway lane tests (correctness limits, not throughput ones; the defaults 2 s and 1 MiB/s
# aborted a 16 MiB PUT of 4 streams at host load 15).
start_hipobj_server "$SRV_DEV" --backend "$HIPOBJ_CEPH_ENDPOINT" --max-rdma-transfers 16 \
  --watchdog-ms 20000 --min-rate 65536 || exit 1
export HIPOBJ_NIC=$CLI_DEV
export AWS_ACCESS_KEY_ID=$HIPOBJ_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$HIPOBJ_TEST_SECRET_KEY
stamp=$(date -u +%Y-%m-%dT%H%M)
out=docs/perf/gateway-ceph-$stamp
mkdir -p "$out"
rc=0
for ((r = 1; r <= ROUNDS; r++)); do
  echo "== round $r: RDMA through the gateway ($HIPOBJ_SRV_URL), HTTP to RGW ($HIPOBJ_CEPH_ENDPOINT)"
  "$HIPOBJ" bench --endpoint "$HIPOBJ_SRV_URL" --http-endpoint "$HIPOBJ_CEPH_ENDPOINT" \
    --sizes 1M,16M --concurrency 1,4 --iterations "${HIPOBJ_BENCH_ITERATIONS:-2}" --json \
    > "$out/round-$r.json" || rc=1
done
python3 benches/gateway-ceph-summary.py "$out" | tee "$out/summary.txt" || rc=1
exit $rc
