#!/bin/bash
# One perftest bandwidth measurement between the lane's two devices (client on the first, server
# on the second, as benches/server_datapath.rs uses them), for the benchmark's alternating rounds:
#   benches/server-datapath-perftest.sh TOOL QPS SIZE ITERS [EXTRA...]
# prints perftest's "BW average" in MB/s on stdout (one number) and exits 0, or exits 1 after a
# second failed try. Each try gets a fresh TCP port and a time limit (HIPOBJ_PERF_TIMEOUT, 90 s).
set -uo pipefail
TOOL=$1 QPS=$2 SIZE=$3 ITERS=$4; shift 4
read -r CLI SRV _ <<<"${HIPOBJ_VM_DEVICES:-rxe0 rxe1}"
SRV=${SRV:-$CLI}
declare -A GIDX GADDR
for kv in ${HIPOBJ_VM_GID_INDEX:-}; do GIDX[${kv%%=*}]=${kv#*=}; done
for kv in ${HIPOBJ_VM_ADDRS:-}; do GADDR[${kv%%=*}]=${kv#*=}; done
LIMIT=${HIPOBJ_PERF_TIMEOUT:-90}
LOG=${TMPDIR:-/tmp}/bench-perftest.$$
listening() { # port: the server's TCP listener is up (tcp or tcp6)
  local hex; hex=$(printf ':%04X' "$1")
  for ((i = 0; i < 200; i++)); do
    [[ $(</proc/net/tcp)$(</proc/net/tcp6) =~ :\ 0+$hex\ 0+:0000\ 0A ]] && return 0
    sleep 0.05
  done
  return 1
}
try() {
  local port=$((20000 + RANDOM % 20000)) spid rc
  timeout "$LIMIT" "$TOOL" -d "$SRV" -x "${GIDX[$SRV]:-1}" -F -p $port -s "$SIZE" -n "$ITERS" \
    -q "$QPS" "$@" >"$LOG.srv" 2>&1 &
  spid=$!
  listening $port || { kill $spid 2>/dev/null; wait $spid; return 1; }
  timeout "$LIMIT" "$TOOL" -d "$CLI" -x "${GIDX[$CLI]:-1}" -F -p $port -s "$SIZE" -n "$ITERS" \
    -q "$QPS" "$@" "${GADDR[$SRV]:-127.0.0.1}" >"$LOG.cli" 2>&1
  rc=$?
  [ $rc = 0 ] || kill $spid 2>/dev/null
  wait $spid || rc=1
  [ $rc = 0 ] || return 1
  # result row: "#bytes #iterations BW-peak BW-average MsgRate"
  BW=$(awk -v s="$SIZE" '$1 == s && NF >= 5 {bw = $4} END {print bw}' "$LOG.cli")
  awk -v b="${BW:-0}" 'BEGIN {exit !(b > 0)}'
}
if try "$@" || { echo "perftest: $TOOL -q $QPS retried" >&2; tail -3 "$LOG.cli" >&2; try "$@"; }; then
  echo "$BW"
  rm -f "$LOG.cli" "$LOG.srv"
  exit 0
fi
echo "perftest: $TOOL -q $QPS -s $SIZE -n $ITERS $* failed twice" >&2
sed 's/^/  client| /' "$LOG.cli" | tail -6 >&2
sed 's/^/  server| /' "$LOG.srv" | tail -6 >&2
rm -f "$LOG.cli" "$LOG.srv"
exit 1
