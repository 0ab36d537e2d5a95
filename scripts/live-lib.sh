# Shell functions the live scripts in this folder share; source it, do not run it.

# Waits until something listens on 127.0.0.1:PORT (at most 10 s), else exits the script.
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "port $1 never opened" >&2
    exit 1
}

# Sets WORK, a scratch directory, and PIDS, the processes to stop; on exit the processes are
# killed and the directory removed.
scratch() {
    WORK=$(mktemp -d)
    PIDS=()
    trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
}
