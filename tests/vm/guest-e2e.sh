#!/bin/bash
# The end-to-end suite of the RDMA lane. Runs where the RDMA devices are: inside the Soft-RoCE guest
# (tests/vm/e2e boots it once and runs this script there), or on a host with real RDMA ports.
# cwd = the repository. Prints one PASS/FAIL line per check and, last, exactly one summary line
# "N passed, N failed"; exits non-zero if any check failed.
#
# Checks: ACTIVE port + RoCE v2 IPv4-mapped GID on each device, an ibv_rc_pingpong round between the
# two devices, ib_write_bw and ib_read_bw at 1 MiB and 8 MiB (figures printed as "BW ..." lines), the
# host-built verbs program (HIPOBJ_E2E_VERBS_BIN), then every executable in tests/vm/e2e.d/, in order.
set -u
REPO=$(pwd -P)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SCRIPT_TIMEOUT=${HIPOBJ_E2E_SCRIPT_TIMEOUT:-900}
PASS=0 FAIL=0 PORT=18800
pass() { PASS=$((PASS + 1)); echo "PASS: $*"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
uptime_s() { local u; read -r u _ </proc/uptime; echo "$u"; }
elapsed() { awk -v a="$1" -v b="$(uptime_s)" 'BEGIN{printf "%.1f", b-a}'; }

# devices: server on the second one, client on the first (one device: both on it)
read -r -a DEVS <<<"${HIPOBJ_VM_DEVICES:-}"
[ ${#DEVS[@]} -gt 0 ] || { fail "HIPOBJ_VM_DEVICES is empty (run through tests/vm/run)"; echo "$PASS passed, $FAIL failed"; exit 1; }
CLI_DEV=${DEVS[0]} SRV_DEV=${DEVS[1]:-${DEVS[0]}}

# index and address of the RoCE v2 GID that maps an IPv4 address (::ffff:a.b.c.d), from sysfs
declare -A GIDX GADDR
roce_v2_ipv4_gid() { # dev -> "index a.b.c.d"
  local f i g t
  for f in "/sys/class/infiniband/$1/ports/1/gids/"*; do
    i=${f##*/}
    g=$(<"$f") 2>/dev/null || continue
    [[ $g == 0000:0000:0000:0000:0000:ffff:* ]] || continue
    t=$(<"/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i") 2>/dev/null || continue
    [ "$t" = "RoCE v2" ] || continue
    g=${g#0000:0000:0000:0000:0000:ffff:}; g=${g/:/}
    printf '%s %d.%d.%d.%d\n' "$i" "0x${g:0:2}" "0x${g:2:2}" "0x${g:4:2}" "0x${g:6:2}"
    return 0
  done
  return 1
}

echo "=== devices: ${DEVS[*]} (client $CLI_DEV, server $SRV_DEV), kernel $(uname -r), $(nproc) CPU"
for dev in "${DEVS[@]}"; do
  info=$(ibv_devinfo -v -d "$dev" 2>&1)
  if grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$info"; then pass "$dev: ibv_devinfo port 1 PORT_ACTIVE"
  else fail "$dev: no PORT_ACTIVE in ibv_devinfo"; echo "$info" | head -20; fi
  if read -r idx addr < <(roce_v2_ipv4_gid "$dev"); then
    GIDX[$dev]=$idx GADDR[$dev]=$addr
    # ibv_devinfo -v prints the table as "GID[  1]:  ::ffff:169.254.77.1, RoCE v2"
    if grep -Eq "GID\[ *$idx\]:[[:space:]]*::ffff:$addr, RoCE v2" <<<"$info"; then
      pass "$dev: GID[$idx] ::ffff:$addr RoCE v2 (ibv_devinfo -v and sysfs gid_attrs agree)"
    else fail "$dev: sysfs has GID[$idx] ::ffff:$addr RoCE v2 but ibv_devinfo -v does not show it"; fi
  else
    fail "$dev: no RoCE v2 IPv4-mapped GID"; grep GID <<<"$info"
  fi
done

wait_tcp_listen() { # port: a server's TCP listener (0.0.0.0 or ::) exists; stdout polling is unreliable
  local hex i                          # (a redirected server's stdout is block-buffered)
  hex=$(printf ':%04X' "$1")
  for ((i = 0; i < 300; i++)); do
    [[ $(</proc/net/tcp)$(</proc/net/tcp6) =~ :\ 0+$hex\ 0+:0000\ 0A ]] && return 0
    sleep 0.05
  done
  return 1
}

# client_server LABEL SERVER_CMD... -- CLIENT_CMD...: one try; output in /tmp/e2e-{srv,cli}.log
client_server() {
  local srv=() cli=() spid rc src
  while [ "$1" != -- ]; do srv+=("$1"); shift; done; shift; cli=("$@")
  timeout 120 "${srv[@]}" >/tmp/e2e-srv.log 2>&1 &
  spid=$!
  if ! wait_tcp_listen "$PORT"; then kill $spid 2>/dev/null; wait $spid; echo "server did not listen" >>/tmp/e2e-srv.log; return 1; fi
  timeout 120 "${cli[@]}" >/tmp/e2e-cli.log 2>&1; rc=$?
  [ $rc = 0 ] || { sleep 1; kill $spid 2>/dev/null; }
  wait $spid; src=$?
  [ $rc = 0 ] && [ $src = 0 ]
}
show_logs() { sed 's/^/  client| /' /tmp/e2e-cli.log | tail -8; sed 's/^/  server| /' /tmp/e2e-srv.log | tail -8; }

# HIPOBJ_E2E_FROM=STAGE (tests/vm/e2e's second boot after a guest kernel panic): the device checks,
# then e2e.d/STAGE and every later stage (the first boot ran the rest); "" = from the start.
FROM=${HIPOBJ_E2E_FROM:-}
if [ -n "$FROM" ]; then
  echo "=== second boot: from e2e.d/$FROM (pingpong and perftest ran in the first)"
elif [ -n "${GIDX[$CLI_DEV]:-}" ] && [ -n "${GIDX[$SRV_DEV]:-}" ]; then
  # ibv_rc_pingpong: RC QPs, 1000 round trips of 4 KiB, received data validated (-c)
  PORT=$((PORT + 1)); t0=$(uptime_s)
  if client_server ibv_rc_pingpong -d "$SRV_DEV" -g "${GIDX[$SRV_DEV]}" -p $PORT -n 1000 -s 4096 -c -- \
       ibv_rc_pingpong -d "$CLI_DEV" -g "${GIDX[$CLI_DEV]}" -p $PORT -n 1000 -s 4096 -c "${GADDR[$SRV_DEV]}"; then
    pass "ibv_rc_pingpong $CLI_DEV -> $SRV_DEV, 1000 x 4 KiB: $(grep -m1 usec/iter /tmp/e2e-cli.log | sed 's/^ *//') ($(elapsed "$t0") s)"
  else fail "ibv_rc_pingpong $CLI_DEV -> $SRV_DEV"; show_logs; fi

  # perftest bandwidth: RDMA WRITE and READ, client on CLI_DEV, server on SRV_DEV
  RETRIES=0
  # HIPOBJ_E2E_PERF_QPS=N: perftest with N QPs at once (-q N; the multi-stream baseline)
  QPS=()
  [ -n "${HIPOBJ_E2E_PERF_QPS:-}" ] && QPS=(-q "$HIPOBJ_E2E_PERF_QPS")
  perf_try() { # tool size iters -> sets BW (MB/s, perftest's "BW average")
    local line
    PORT=$((PORT + 1))
    client_server "$1" -d "$SRV_DEV" -x "${GIDX[$SRV_DEV]}" -F -p $PORT -s "$2" -n "$3" "${QPS[@]}" -- \
      "$1" -d "$CLI_DEV" -x "${GIDX[$CLI_DEV]}" -F -p $PORT -s "$2" -n "$3" "${QPS[@]}" "${GADDR[$SRV_DEV]}" || return 1
    # result row: "#bytes #iterations BW-peak BW-average MsgRate"
    line=$(awk -v s="$2" '$1 == s && NF >= 5' /tmp/e2e-cli.log | tail -1)
    BW=$(awk '{print $4}' <<<"$line")
    # perftest sometimes reports 0.00 MB/s under TCG: a failed try
    awk -v b="${BW:-0}" 'BEGIN{exit !(b > 0)}'
  }
  for tool in ib_write_bw ib_read_bw; do
    for size in ${HIPOBJ_E2E_SIZES:-1048576 8388608}; do
      # 100 MiB and 128 MiB per figure
      mib=$((size >> 20)); iters=$((size == 1048576 ? 100 : 16)); t0=$(uptime_s)
      if perf_try $tool $size $iters || { RETRIES=$((RETRIES + 1)); echo "RETRY: $tool ${mib}MiB"; show_logs; perf_try $tool $size $iters; }; then
        echo "BW $tool ${mib}MiB: $BW MB/s"
        pass "$tool ${mib} MiB x $iters $CLI_DEV -> $SRV_DEV: $BW MB/s ($(elapsed "$t0") s)"
      else fail "$tool ${mib} MiB"; show_logs; fi
    done
  done
  echo "=== perftest retries: $RETRIES"
  # rxe's own counters: send_err = packets the netdev dropped, *retry* = retransmissions
  for dev in "${DEVS[@]}"; do
    c=/sys/class/infiniband/$dev/ports/1/hw_counters
    [ -d "$c" ] || continue
    echo "=== $dev counters: $(for n in sent_pkts rcvd_pkts send_err retry_exceeded_err completer_retry_err duplicate_request out_of_seq_request; do
      [ -r "$c/$n" ] && printf '%s=%s ' "$n" "$(<"$c/$n")"; done)"
  done
else
  fail "no usable GID: skipping ibv_rc_pingpong and perftest"
fi

# HIPOBJ_E2E_PERF_ONLY=1: the device checks and perftest only (the baseline of `make demo`)
if [ "${HIPOBJ_E2E_PERF_ONLY:-0}" = 1 ]; then
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ]; exit
fi

# a binary built on the host from this repository (tests/vm/verbs-devices.c)
if [ -n "${HIPOBJ_E2E_VERBS_BIN:-}" ] && [ -x "$HIPOBJ_E2E_VERBS_BIN" ]; then
  if out=$("$HIPOBJ_E2E_VERBS_BIN" 2>&1); then pass "host-built $(basename "$HIPOBJ_E2E_VERBS_BIN"): ${out##*$'\n'}"
  else fail "host-built $(basename "$HIPOBJ_E2E_VERBS_BIN")"; fi
  while IFS= read -r l; do echo "  | $l"; done <<<"$out"
else
  fail "host-built verbs-devices binary missing (HIPOBJ_E2E_VERBS_BIN=${HIPOBJ_E2E_VERBS_BIN:-})"
fi

# Issue 52: no secret on any command line while the suite runs (tests/support/argv-secrets.sh).
. "$REPO/tests/support/argv-secrets.sh"
argv_watch_start

# the project's own end-to-end tests
for t in "$HERE"/e2e.d/*; do
  if [ ! -f "$t" ] || [ ! -x "$t" ]; then continue; fi
  name=${t##*/}; t0=$(uptime_s)
  if [ -n "$FROM" ] && [[ $name < $FROM ]]; then continue; fi
  echo "=== e2e.d/$name"
  (cd "$REPO" && timeout -k 10 "$SCRIPT_TIMEOUT" "$t"); rc=$?
  if [ $rc = 0 ]; then pass "e2e.d/$name ($(elapsed "$t0") s)"
  elif [ $rc = 124 ]; then fail "e2e.d/$name: timed out after $SCRIPT_TIMEOUT s"
  else fail "e2e.d/$name: exit $rc ($(elapsed "$t0") s)"; fi
done

if verdict=$(argv_watch_verdict); then pass "$verdict"; else fail "$verdict"; fi

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
