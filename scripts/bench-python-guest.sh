#!/bin/bash
# Runs in the lane (scripts/bench-python): the 64 MiB GET of the Rust/C core's benchmark
# (benches/rdma_throughput.rs, the same transfer core as libhipobj's hipObjGet) and of Python's
# get_object (benches/python_get.py), alternated twice in this one boot; prints both medians and
# the ratio python / core.
set -euo pipefail
SIZE=${1:-67108864} ROUNDS=${2:-5}
BENCH=$(cat target/e2e/bench.txt)
export HIPOBJ_SERVER_BIN=$PWD/target/release/hipobj-server
core=() py=()
for pass in 1 2; do
  out=$("$BENCH" "$SIZE" "$ROUNDS"); echo "$out"
  core+=("$(sed -n 's/^RESULT hipobj .* GET \([0-9.]*\) MB\/s.*/\1/p' <<<"$out")")
  out=$(target/python-venv/bin/python benches/python_get.py "$SIZE" "$ROUNDS"); echo "$out"
  py+=("$(sed -n 's/^RESULT python .* GET \([0-9.]*\) MB\/s.*/\1/p' <<<"$out")")
done
awk -v c="${core[*]}" -v p="${py[*]}" 'BEGIN {
  nc = split(c, a, " "); np = split(p, b, " "); sc = 0; sp = 0
  for (i = 1; i <= nc; i++) sc += a[i]; for (i = 1; i <= np; i++) sp += b[i]
  printf "RATIO python get_object / core hipObjGet, %d MiB: %.2f (%.1f / %.1f MB/s, mean of %d passes of median-of-'"$ROUNDS"', same boot)\n", '"$SIZE"' / 1048576, (sp/np) / (sc/nc), sp/np, sc/nc, np }'
