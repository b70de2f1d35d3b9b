#!/bin/bash
# Runs where the RDMA devices are (inside the lane): the perftest baseline, then the hipobj command
# line against hipobj-server (info, cp each way with a byte check, bench beside the perftest figures).
set -uo pipefail
echo "=== baseline: perftest in this boot"
HIPOBJ_E2E_PERF_ONLY=1 HIPOBJ_E2E_SIZES=8388608 tests/vm/guest-e2e.sh > /tmp/demo-perf.log 2>&1
grep -E "^(BW|PASS|FAIL)" /tmp/demo-perf.log
W=$(sed -n 's/^BW ib_write_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/demo-perf.log | tail -1)
R=$(sed -n 's/^BW ib_read_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/demo-perf.log | tail -1)
W=${W:-} R=${R:-} exec scripts/demo-cli-guest.sh "$@"
