# Sourced by scripts that run a long, quiet step (.ci/local_llm_setup.sh, scripts/quickstart.sh).
#
# heartbeat LABEL CMD [ARG ...]: run CMD in the foreground and print "LABEL (N s)..." every
# $HEARTBEAT_S seconds (default 30) until it ends, so a build that is silent for minutes
# (pip compiling llama-cpp-python) does not look hung; returns CMD's exit status. The
# ticker is a background subshell, stopped however CMD or the script ends.
heartbeat() {
    local label="$1" every="${HEARTBEAT_S:-30}" start rc=0 ticker
    shift
    start=$(date +%s)
    # $$ is this script's shell: the ticker also ends if the script is killed mid-step
    ( while sleep "$every" && kill -0 "$$" 2>/dev/null; do
        echo "$label ($(( $(date +%s) - start )) s)..."
      done ) &
    ticker=$!
    "$@" || rc=$?
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    return "$rc"
}
