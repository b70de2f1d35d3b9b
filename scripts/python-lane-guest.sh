#!/bin/bash
# One lane boot for the Python work by hand: the pytest suite, then (with --bench) the 64 MiB
# benchmark. make e2e runs the suite through tests/vm/e2e.d/42-python instead.
set -uo pipefail
rc=0
tests/vm/e2e.d/42-python -v -o console_output_style=classic --durations=10 || rc=$?
if [ "${1:-}" = --bench ]; then bash scripts/bench-python-guest.sh || rc=$?; fi
exit $rc
