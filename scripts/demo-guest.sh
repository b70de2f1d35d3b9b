#!/bin/bash
# Runs where the RDMA devices are (inside the lane): perftest baseline, then the hipObject PUT/GET,
# then the hipobj command line (info, cp each way with a byte check, bench beside the perftest figures).
set -uo pipefail
echo "=== baseline: perftest in this boot"
HIPOBJ_E2E_PERF_ONLY=1 HIPOBJ_E2E_SIZES=8388608 tests/vm/guest-e2e.sh > /tmp/demo-perf.log 2>&1
grep -E "^(BW|PASS|FAIL)" /tmp/demo-perf.log
W=$(sed -n 's/^BW ib_write_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/demo-perf.log | tail -1)
R=$(sed -n 's/^BW ib_read_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/demo-perf.log | tail -1)
echo "=== hipObject: 64 MiB PUT and GET over RDMA"
HIPOBJ_SERVER_BIN=$PWD/target/e2e/release/hipobj-server HIPOBJ_BASELINE_WRITE_MBS=${W:-} HIPOBJ_BASELINE_READ_MBS=${R:-} \
  "$(cat target/e2e/bench.txt)" "$@"
rc=$?
W=${W:-} R=${R:-} scripts/demo-cli-guest.sh || rc=1
exit $rc
