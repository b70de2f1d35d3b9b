#!/bin/bash
# 55-rails again and again in one two-rail boot (HIPOBJ_RAILS_LOOPS, default 8): how often the guest kernel locks up.
#   flock /tmp/hipobj-lane.lock tests/vm/run --rails 2 --timeout 1400 -- tests/vm/rails-loop.sh
n=${HIPOBJ_RAILS_LOOPS:-8}; pass=0; fail=0
echo "kernel $(uname -r)"
for ((i = 1; i <= n; i++)); do
  t0=$SECONDS
  if tests/vm/e2e.d/55-rails > target/rails-loop-$i.log 2>&1; then pass=$((pass + 1)); r=PASS; else fail=$((fail + 1)); r=FAIL; fi
  echo "iteration $i: $r ($((SECONDS - t0)) s); $(grep -E 'test result' target/rails-loop-$i.log | tail -1)"
done
echo "55-rails: $pass passed, $fail failed of $n"
