# Issue 52: no secret on any command line. Source this file, call `argv_watch_start` before the
# work and `argv_watch_verdict` after it: a sampler records every process's arguments
# (ps -eo args) twice a second meanwhile; the verdict prints one line and returns 1 when a sample
# holds one of the secrets the project's tests and demo use (their identities' keys), each masked.
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
  samples=$(grep -c '^COMMAND' "$ARGV_LOG")
  shown=$(grep -F "${ARGV_SECRETS[@]/#/-e}" "$ARGV_LOG" | sort -u | head -5 |
    sed "$(printf 's/%s/<secret>/g;' "${ARGV_SECRETS[@]}")")
  rm -f "$ARGV_LOG"
  if [ "$samples" -gt 0 ] && [ -z "$shown" ]; then
    echo "no secret on any command line in $samples samples of ps -eo args"
    return 0
  fi
  echo "a secret on a command line ($samples samples): ${shown:-no samples taken}"
  return 1
}
