#!/bin/bash
# Runs inside the guest, in 'chroot /host' (the host's bash, iproute2 and rdma-core on the guest
# kernel). Creates the two Soft-RoCE devices, checks RC traffic, and writes guest.env for COMMAND.
#
#   rxe0 on veth 'hvm0' 169.254.77.1/32   GID ::ffff:169.254.77.1 (RoCE v2)
#   rxe1 on veth 'hvm1' 169.254.77.2/32   GID ::ffff:169.254.77.2 (RoCE v2)
# and with `tests/vm/run --rails 2` (issue 40: two rails each for client and server) a second
# pair on its own veth link and subnet:
#   rxe2 on veth 'hvm2' 169.254.78.1/32,  rxe3 on veth 'hvm3' 169.254.78.2/32
#
# Why veth and policy routing: both addresses are local to the guest, so by default the kernel
# routes rxe0 -> 169.254.77.2 through 'lo', and rxe's UDP receive path finds no rxe device on 'lo'
# and drops the packet. Routes looked up with the outgoing device set to hvm0 (rxe and ib_core
# always set it) are sent out of hvm0 instead, arrive on hvm1, and reach rxe1; traffic between two
# QPs of one device keeps rxe's internal loopback path. Ordinary sockets (no oif) are unaffected.
# Nothing leaves the guest: it has no NIC.
set -u
CTL=/run/hipobj-vm
RAILS=$(cat "$CTL/rails" 2>/dev/null || echo 1)
# rail k: client device rxe(2k) on hvm(2k), server device rxe(2k+1) on hvm(2k+1), subnet 169.254.(77+k)
declare -A ADDR
for ((k = 0; k < RAILS; k++)); do
  ADDR[$((2 * k))]=169.254.$((77 + k)).1 ADDR[$((2 * k + 1))]=169.254.$((77 + k)).2
done
N=$((2 * RAILS))
log() { local u; read -r u _ </proc/uptime; echo "setup-rdma: [$u] $*"; }
fail() { echo "setup-rdma: FAILED: $*"; exit 1; }
run() { "$@" || fail "$*"; }

# one 'ip -batch' (every program start costs a 9p lookup under TCG)
{
  echo "link set lo up"
  for ((k = 0; k < RAILS; k++)); do echo "link add hvm$((2 * k)) type veth peer name hvm$((2 * k + 1))"; done
} | ip -batch - || fail "network setup (ip -batch)"
for ((i = 0; i < N; i++)); do echo 1 > /proc/sys/net/ipv6/conf/hvm$i/disable_ipv6; done
# packets from a local source address arrive on the peer veth: accept them
for c in all default $(for ((i = 0; i < N; i++)); do echo hvm$i; done); do
  echo 1 > /proc/sys/net/ipv4/conf/$c/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$c/rp_filter
done
# veth hands every packet to the per-CPU backlog queue (default 1000 packets). An 8 MiB RDMA READ
# answer is 2048 packets in one burst; under TCG the receive softirq falls behind, the queue
# overflows, rxe's send fails (hw_counters/send_err) and READs crawl or stall in retries. Measured:
# 200-970 drops per 8 MiB ib_read_bw run and a 40 s stall at 1000; none at 100000.
echo 100000 > /proc/sys/net/core/netdev_max_backlog
# veth puts a received packet on the backlog of the CPU that sent it, and rxe sends one QP's
# packets from whichever CPU runs its task (the posting process, a tasklet, ksoftirqd): the two
# CPUs' backlogs then deliver one QP's packets out of order, which RC answers with a NAK or a
# read-response retry (completer_retry_err, duplicate_request) and, at worst, a 67 ms timeout.
# Receive packet steering keeps each flow (rxe: one UDP source port per QP) on one CPU, in order,
# as a hardware NIC's receive-side scaling does. Measured in one boot, 8 MiB GET/PUT + perftest
# (benches/server-datapath single, 4 rounds each): 56 and 56 retries per run without it, 0 and 0
# with it.
# Steering over all online CPUs (/sys/.../online is "0" or "0-N"): mask of N+1 bits, in hex.
read -r online </sys/devices/system/cpu/online
last=${online##*-}
printf -v rps_mask '%x' $(((1 << (last + 1)) - 1))
for ((i = 0; i < N; i++)); do echo "$rps_mask" > /sys/class/net/hvm$i/queues/rx-0/rps_cpus; done
# each veth end i talks to its peer p = i ^ 1 (table 77 + i, rule pref 10 + i)
{
  for ((i = 0; i < N; i++)); do
    p=$((i ^ 1))
    echo "link set hvm$i mtu 9000 up"
    echo "addr add ${ADDR[$i]}/32 dev hvm$i"
    echo "route add ${ADDR[$p]}/32 dev hvm$i table $((77 + i)) src ${ADDR[$i]}"
    echo "rule add pref $((10 + i)) oif hvm$i to ${ADDR[$p]}/32 lookup $((77 + i))"
    echo "neigh replace ${ADDR[$p]} lladdr $(</sys/class/net/hvm$p/address) dev hvm$i nud permanent"
  done
  echo "rule add pref 100 lookup local"
  echo "rule del pref 0 lookup local"
} | ip -batch - || fail "network setup (ip -batch)"

for ((i = 0; i < N; i++)); do run rdma link add rxe$i type rxe netdev hvm$i; done

# port ACTIVE, and the index of the RoCE v2 GID that maps the device's IPv4 address
gid_index() { # dev addr
  local f i want octets
  IFS=. read -r -a octets <<<"$2"
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "${octets[@]}")
  for f in "/sys/class/infiniband/$1/ports/1/gids/"*; do
    i=${f##*/}
    [ "$(<"$f")" = "$want" ] || continue
    [ "$(<"/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i")" = "RoCE v2" ] 2>/dev/null || continue
    echo "$i"; return 0
  done
  return 1
}
declare -A GIDX
for ((n = 0; n < N; n++)); do
  dev=rxe$n addr=${ADDR[$n]}
  state=/sys/class/infiniband/$dev/ports/1/state
  for ((i = 0; i < 100; i++)); do
    [[ $(<"$state") == *ACTIVE* ]] 2>/dev/null && GIDX[$dev]=$(gid_index "$dev" "$addr") && break
    sleep 0.1
  done
  [ -n "${GIDX[$dev]:-}" ] || fail "$dev: port not ACTIVE or no RoCE v2 GID ::ffff:$addr ($(<"$state"))"
  log "$dev on hvm${dev#rxe} $addr: $(<"$state"), GID[${GIDX[$dev]}] ::ffff:$addr RoCE v2"
done

# RC traffic between two processes: on one device, and across rxe0 <-> rxe1
wait_tcp_listen() { # port
  local hex i
  hex=$(printf ':%04X' "$1")
  for ((i = 0; i < 200; i++)); do
    # LISTEN (0A) on 0.0.0.0 or :: (ibv_rc_pingpong binds whatever getaddrinfo lists first)
    [[ $(</proc/net/tcp)$(</proc/net/tcp6) =~ :\ 0+$hex\ 0+:0000\ 0A ]] && return 0
    sleep 0.05
  done
  return 1
}
pingpong() { # server-dev client-dev port
  local spid rc
  timeout 60 ibv_rc_pingpong -d "$1" -g "${GIDX[$1]}" -p "$3" -n 100 -s 4096 >/tmp/pp-srv.log 2>&1 &
  spid=$!
  wait_tcp_listen "$3" || { kill $spid 2>/dev/null; fail "ibv_rc_pingpong server on $1 did not listen"; }
  timeout 60 ibv_rc_pingpong -d "$2" -g "${GIDX[$2]}" -p "$3" -n 100 -s 4096 127.0.0.1 >/tmp/pp-cli.log 2>&1
  rc=$?
  wait $spid || rc=1
  if [ $rc != 0 ]; then cat /tmp/pp-srv.log /tmp/pp-cli.log; fail "ibv_rc_pingpong $1 <- $2"; fi
  log "ibv_rc_pingpong $1 <- $2 ok: $(grep -m1 usec/iter /tmp/pp-cli.log | sed 's/^ *//')"
}
pingpong rxe0 rxe0 18701
rails="" addrs="" gids=""
for ((k = 0; k < RAILS; k++)); do
  pingpong rxe$((2 * k + 1)) rxe$((2 * k)) $((18702 + k))
  rails+="${rails:+ }rxe$((2 * k)):rxe$((2 * k + 1))"
done
for ((i = 0; i < N; i++)); do
  addrs+="${addrs:+ }rxe$i=${ADDR[$i]}" gids+="${gids:+ }rxe$i=${GIDX[rxe$i]}"
done

cat > $CTL/guest.env <<ENV
export HIPOBJ_VM=1
export HIPOBJ_VM_DEVICES="rxe0 rxe1"
export HIPOBJ_VM_RAILS="$rails"
export HIPOBJ_VM_ADDRS="$addrs"
export HIPOBJ_VM_GID_INDEX="$gids"
ENV
