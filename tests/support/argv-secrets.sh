# Issue 52: no secret on any command line. Source this file, call `argv_watch_start` before the
# work and `argv_watch_verdict` after it: a sampler records every process's arguments
# (ps -eo args) twice a second meanwhile; the verdict prints one line and returns 1 when a sample
# holds one of the secrets the project's tests and demo use (their identities' keys), each masked.
# One exception, counted and said: the gateway tests' backing store, s3s-fs 0.14.1 (crates.io,
# unmodified: a peer, not ours), takes its keys only as arguments (--secret-key); its command
# lines are left out of the check, never any of the project's own processes.
ARGV_SECRETS=(hipobjtestsecret0123456789 hipobj-test-secret hipobj-other-secret clitestsecret0123456789
              curl-e2e-secret-key capi-app-secret-key gid-app-secret-key)
ARGV_LOG=/tmp/hipobj-ps-args.$$.log

argv_watch_start() {
  : > "$ARGV_LOG"
  ( while :; do ps -eo args >> "$ARGV_LOG" 2>/dev/null; sleep 0.5; done ) &
  ARGV_SAMPLER=$!
}

argv_watch_verdict() {
  local samples shown
  kill "$ARGV_SAMPLER" 2>/dev/null; wait "$ARGV_SAMPLER" 2>/dev/null
  local peer
  samples=$(grep -c '^COMMAND' "$ARGV_LOG")
  peer=$(grep -c '/s3s-fs/bin/s3s-fs ' "$ARGV_LOG")
  shown=$(grep -v '/s3s-fs/bin/s3s-fs ' "$ARGV_LOG" | grep -F "${ARGV_SECRETS[@]/#/-e}" | sort -u | head -5 |
    sed "$(printf 's/%s/<secret>/g;' "${ARGV_SECRETS[@]}")")
  rm -f "$ARGV_LOG"
  if [ "$samples" -gt 0 ] && [ -z "$shown" ]; then
    echo "no secret on any command line of ours in $samples samples of ps -eo args ($peer lines of the third-party s3s-fs store left out)"
    return 0
  fi
  echo "a secret on a command line ($samples samples): ${shown:-no samples taken}"
  return 1
}
