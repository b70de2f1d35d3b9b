# Start and stop hipobj-server from the lane's shell tests (the shell twin of server.rs). Source it:
#   . tests/support/server.sh
#   start_hipobj_server DEVICE [EXTRA SERVER FLAGS...]   # device "" = no RDMA (token requests get 501)
#                                     # with --backend URL among the flags: a gateway, no --data-dir
#   -> HIPOBJ_SRV_URL (http://ADDR:PORT), HIPOBJ_SRV_LOG, HIPOBJ_SRV_DATA; stopped at exit
# The data directory is made under $TMPDIR (default /tmp). The server requires SigV4 with HIPOBJ_TEST_ACCESS_KEY / HIPOBJ_TEST_SECRET_KEY (exported, so the
# clients under test can read them; the server gets the secret in its environment,
# HIPOBJ_SECRET_KEY, never on its command line); it listens on the lane address of its device
# (any local address works: the clients bind their socket to their own NIC's address).
HIPOBJ_TEST_ACCESS_KEY=${HIPOBJ_TEST_ACCESS_KEY:-hipobjtestkey}
HIPOBJ_TEST_SECRET_KEY=${HIPOBJ_TEST_SECRET_KEY:-hipobjtestsecret0123456789}
export HIPOBJ_TEST_ACCESS_KEY HIPOBJ_TEST_SECRET_KEY
HIPOBJ_SRV_PIDS=()

lane_addr() { # device -> its IPv4 address in the lane (HIPOBJ_VM_ADDRS), else 127.0.0.1
  local a
  for a in ${HIPOBJ_VM_ADDRS:-}; do [ "${a%%=*}" = "$1" ] && { echo "${a#*=}"; return; }; done
  echo 127.0.0.1
}

stop_hipobj_servers() {
  local p
  for p in "${HIPOBJ_SRV_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  HIPOBJ_SRV_PIDS=()
}
trap stop_hipobj_servers EXIT

start_hipobj_server() { # device [flags...]
  local dev=$1 bin=${HIPOBJ_SERVER_BIN:-$PWD/target/release/hipobj-server} addr port i
  shift
  addr=$(lane_addr "$dev")
  HIPOBJ_SRV_DATA=$(mktemp -d "${TMPDIR:-/tmp}/hipobj-srv.XXXXXX")
  HIPOBJ_SRV_LOG=$HIPOBJ_SRV_DATA.log
  # A gateway (--backend URL among the flags) keeps no data of its own.
  local store=(--data-dir "$HIPOBJ_SRV_DATA")
  [[ " $* " == *" --backend "* ]] && store=()
  HIPOBJ_SECRET_KEY=$HIPOBJ_TEST_SECRET_KEY "$bin" --listen "$addr:0" "${store[@]}" ${dev:+--device "$dev"} \
    --access-key "$HIPOBJ_TEST_ACCESS_KEY" "$@" >"$HIPOBJ_SRV_LOG" 2>&1 &
  HIPOBJ_SRV_PIDS+=($!)
  for ((i = 0; i < 600; i++)); do
    port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$HIPOBJ_SRV_LOG" | head -1)
    [ -n "$port" ] && break
    kill -0 "${HIPOBJ_SRV_PIDS[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "hipobj-server did not start:"; cat "$HIPOBJ_SRV_LOG"; return 1; }
  HIPOBJ_SRV_URL=http://$addr:$port
}

# signed_curl ARGS...: curl with its own SigV4 as the test identity; the keys reach curl on its
# standard input (a config file, -K -), never on its command line, where `ps` would show them.
signed_curl() {
  printf 'user = "%s:%s"\n' "$HIPOBJ_TEST_ACCESS_KEY" "$HIPOBJ_TEST_SECRET_KEY" |
    curl -K - -sSf --aws-sigv4 "aws:amz:us-east-1:s3" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

# create_bucket BUCKET: a signed CreateBucket (curl's own SigV4) on the last server started
create_bucket() {
  signed_curl -X PUT "$HIPOBJ_SRV_URL/$1" -o /dev/null
}

# server_stats: the counters of the last server started (GET /_hipobj/stats: one flat JSON object
# of numbers, plus `devices`, per-device counters, with RDMA on)
server_stats() {
  signed_curl "$HIPOBJ_SRV_URL/_hipobj/stats"
}

# counted BEFORE NAME=N...: the server's counters moved by exactly N since BEFORE (a server_stats
# output); prints each one that did not ("rdma_puts +0, expected +1") and returns 1 then
counted() {
  local before=$1 now
  shift
  now=$(server_stats) || { echo "no /_hipobj/stats"; return 1; }
  python3 - "$before" "$now" "$@" <<'PY'
import json, sys
before, now = json.loads(sys.argv[1]), json.loads(sys.argv[2])
wrong = []
for want in sys.argv[3:]:
    name, n = want.split("=")
    moved = now.get(name, 0) - before.get(name, 0)
    if moved != int(n):
        wrong.append(f"{name} +{moved}, expected +{n}")
print("; ".join(wrong) if wrong else " ".join(f"{w.replace('=', ' +')}" for w in sys.argv[3:]))
sys.exit(1 if wrong else 0)
PY
}
