#!/bin/bash
# Several NICs through the command line (issue 40), in the lane with two rails (HIPOBJ_VM_RAILS,
# tests/vm/run --rails 2). `hipobj cp --nic rxe0,rxe2` copies 64 MiB (8 parts) up and down: byte-equal,
# the closing line names both devices with transfers on each, and the server's per-device
# counters (/_hipobj/stats "devices") show both of its devices carried bytes. Then the second
# rail's link goes down: `hipobj info` shows its port DOWN and a copy still moves every byte on
# the first; the link and its routes are put back at the end, failed or not.
set -euo pipefail
. tests/support/server.sh
read -r RAIL1 RAIL2 _ <<<"${HIPOBJ_VM_RAILS:?needs the lane with two rails (tests/vm/run --rails 2)}"
[ -n "${RAIL2:-}" ] || { echo "rails-cli: one rail only (HIPOBJ_VM_RAILS=$HIPOBJ_VM_RAILS)" >&2; exit 1; }
C1=${RAIL1%%:*} S1=${RAIL1#*:} C2=${RAIL2%%:*} S2=${RAIL2#*:}
W=$PWD/target/e2e-tmp/rails
mkdir -p "$W"
ok() { echo "rails-cli: ok: $*"; }
fail() { echo "rails-cli: FAILED: $*" >&2; exit 1; }

veth() { echo "hvm${1#rxe}"; }
addr_of() { lane_addr "$1"; }
# link_up CLIENT SERVER: up, and each end's route and neighbour as tests/vm/guest/setup-rdma.sh made them
link_up() {
  ip link set "$(veth "$1")" up
  local me peer
  for pair in "$1 $2" "$2 $1"; do
    read -r me peer <<<"$pair"
    ip route replace "$(addr_of "$peer")/32" dev "$(veth "$me")" table $((77 + ${me#rxe})) src "$(addr_of "$me")"
    ip neigh replace "$(addr_of "$peer")" lladdr "$(cat "/sys/class/net/$(veth "$peer")/address")" \
      dev "$(veth "$me")" nud permanent
  done
}
cleanup() { link_up "$C2" "$S2" 2>/dev/null || true; rm -rf "$W"; stop_hipobj_servers; }
trap cleanup EXIT

start_hipobj_server "$S1,$S2" --copy-gets  # as tests/rails_rdma.rs: no file registration
create_bucket rails
export AWS_ENDPOINT_URL=$HIPOBJ_SRV_URL AWS_ACCESS_KEY_ID=$HIPOBJ_TEST_ACCESS_KEY \
  AWS_SECRET_ACCESS_KEY=$HIPOBJ_TEST_SECRET_KEY HIPOBJ_TRANSPORT=rdma
HIPOBJ=target/release/hipobj
head -c 64M /dev/urandom >"$W/obj"

# both_rails LINE: the closing line says each client device carried transfers
both_rails() {
  grep -Eq "$C1 [1-9][0-9]* transfers" <<<"$1" && grep -Eq "$C2 [1-9][0-9]* transfers" <<<"$1"
}
up=$("$HIPOBJ" cp --nic "$C1,$C2" "$W/obj" s3://rails/obj)
echo "$up"
both_rails "$up" || fail "the upload did not use both rails"
down=$("$HIPOBJ" cp --nic "$C1,$C2" s3://rails/obj "$W/back")
echo "$down"
both_rails "$down" || fail "the download did not use both rails"
cmp "$W/obj" "$W/back" || fail "the download differs"
ok "64 MiB up and down over $C1 and $C2, byte-equal"
stats=$(server_stats)
python3 - "$S1" "$S2" "$stats" <<'PY' || fail "the server's devices did not both carry bytes: $stats"
import json, sys
devices = json.loads(sys.argv[3])["devices"]
for name in sys.argv[1:3]:
    print(f"rails-cli: server {name}: {devices[name]}")
    assert devices[name]["bytes"] > 0, name
PY
ok "the server's $S1 and $S2 both carried bytes"

ip link set "$(veth "$C2")" down
info=$("$HIPOBJ" info --nic "$C1,$C2" || true)
awk -v d="$C2" '$1 == d {on = 1; next} /^[^ ]/ {on = 0} on && /port [0-9]+: DOWN/ {found = 1} END {exit !found}' <<<"$info" \
  || { echo "$info"; fail "hipobj info does not show $C2's port DOWN"; }
ok "hipobj info shows $C2's port DOWN"
rm -f "$W/back"
again=$("$HIPOBJ" cp --nic "$C1,$C2" s3://rails/obj "$W/back")
echo "$again"
cmp "$W/obj" "$W/back" || fail "the download with $C2 down differs"
# A device whose port is down when the library starts is left out until the next start.
! grep -Eq "$C2 [1-9][0-9]* transfers" <<<"$again" || fail "$C2 carried transfers while its link was down"
ok "with $C2's link down every byte moved on $C1"
