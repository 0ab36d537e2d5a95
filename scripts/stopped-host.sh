#!/usr/bin/env bash
# A host stopped mid-response, live on 127.0.0.1: five independent replicas (Python's
# http.server, 4 worker threads each, exponential service of mean 10 ms, two of them twice as
# slow; it writes a response's head and body in two sends) each behind `prequal sidecar`, one
# `prequal proxy` with its defaults over the sidecars, and `prequal loadgen` at 150 queries/s
# for 30 s with a 5 s timeout. At 8 s replica 1's service and sidecar are stopped (SIGSTOP), at
# 16 s replica 2's are killed, at 24 s replica 1 resumes (SIGCONT).
#
# The proxy runs once with `response_buffer_limit = 0` (every response streamed, the try over
# at its head) and once with the default (small responses read whole within the try), RUNS
# times each, alternated; each run prints the load generator's summary line, whose last two
# columns are errors and timeouts. A stopped sidecar may hold a response whose head it has
# relayed and whose body it has not: streamed, that request waits out the client's timeout.
#
# Needs python3. Usage: scripts/stopped-host.sh   (env: RUNS=2, REPLICA_QUEUE=fifo; semaphore gives
# the replicas the out-of-order queue they had before 2026-11-28, scripts/replica.py --queue)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/live-lib.sh
source scripts/live-lib.sh
command -v python3 >/dev/null || { echo "scripts/stopped-host.sh needs python3" >&2; exit 1; }
RUNS=${RUNS:-2}
cargo build --release -q -p prequal
BIN=$PWD/target/release/prequal
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Replica i: service on 1910i, sidecar on 1920i; its pids in $WORK/replica$i.
start_replica() {
    local i=$1 factor=1
    [ "$i" -ge 4 ] && factor=2
    python3 scripts/replica.py "1910$i" --workers 4 --queue "${REPLICA_QUEUE:-fifo}" \
        --service exp:0.01 --factor "$factor" \
        >/dev/null 2>&1 &
    local service=$!
    "$BIN" sidecar --listen "127.0.0.1:1920$i" --upstream "127.0.0.1:1910$i" >/dev/null 2>&1 &
    PIDS+=("$service" $!)
    echo "$service $!" >"$WORK/replica$i"
}

one_run() {
    local limit=$1 proxy faults
    for i in 1 2 3 4 5; do start_replica "$i"; done
    for i in 1 2 3 4 5; do wait_port "1910$i"; wait_port "1920$i"; done
    cat >"$WORK/proxy.toml" <<TOML
[server]
listen = "127.0.0.1:19300"
[admin]
listen = "127.0.0.1:19399"
[clusters.default]
upstreams = ["127.0.0.1:19201", "127.0.0.1:19202", "127.0.0.1:19203", "127.0.0.1:19204", "127.0.0.1:19205"]
$limit
TOML
    "$BIN" proxy --config "$WORK/proxy.toml" >"$WORK/proxy.log" 2>&1 &
    proxy=$!
    PIDS+=("$proxy")
    wait_port 19300
    (
        sleep 8; kill -STOP $(cat "$WORK/replica1")
        sleep 8; kill $(cat "$WORK/replica2")
        sleep 8; kill -CONT $(cat "$WORK/replica1")
    ) &
    faults=$!
    "$BIN" loadgen --target http://127.0.0.1:19300/ --rate 150 --duration 30s --timeout 5s \
        --objective 100ms 2>&1 | awk '$1 == "all"'
    wait "$faults"
    kill "$proxy"
    wait "$proxy" 2>/dev/null || true
    for i in 1 3 4 5; do kill $(cat "$WORK/replica$i") 2>/dev/null || true; done
    sleep 0.5
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "phase                  queries    p50 ms    p90 ms    p99 ms  p99.9 ms    max ms   <=100ms  errors timeouts"
for run in $(seq "$RUNS"); do
    echo "run $run, response_buffer_limit = 0:"
    one_run "response_buffer_limit = 0"
    echo "run $run, defaults:"
    one_run ""
done
