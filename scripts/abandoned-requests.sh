#!/usr/bin/env bash
# Clients that give up on a slow endpoint, live on 127.0.0.1: three independent replicas
# (Python's http.server, a thread per request) each behind `prequal sidecar`, one `prequal
# proxy` with its defaults over the sidecars, and two `prequal loadgen`s side by side for 20 s:
# 60 queries/s to a fast endpoint (10 ms, 5 s timeout), and 20 queries/s to a slow one (1 s)
# whose clients give up after 300 ms. Every replica keeps answering; nothing is wrong with any.
#
# Prints the fast endpoint's summary line (its last two columns are errors and timeouts) and,
# per replica, its ejections and failures in a row, from the proxy's admin API. A try whose
# client left counts against its replica only if the replica showed no sign of life since it
# was sent (docs/proxy.md, step 7).
#
# Needs python3. Usage: scripts/abandoned-requests.sh   (env: RUNS=1; BIN=path of a prequal
# binary to run instead of building this checkout's)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/live-lib.sh
source scripts/live-lib.sh
command -v python3 >/dev/null || { echo "scripts/abandoned-requests.sh needs python3" >&2; exit 1; }
RUNS=${RUNS:-1}
if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p prequal
    BIN=$PWD/target/release/prequal
fi
scratch

one_run() {
    local started=()
    for i in 1 2 3; do
        python3 scripts/replica.py "1940$i" --slow-path /slow=1.0 >/dev/null 2>&1 &
        started+=($!)
        "$BIN" sidecar --listen "127.0.0.1:1950$i" --upstream "127.0.0.1:1940$i" >/dev/null 2>&1 &
        started+=($!)
    done
    for i in 1 2 3; do wait_port "1940$i"; wait_port "1950$i"; done
    cat >"$WORK/proxy.toml" <<TOML
[server]
listen = "127.0.0.1:19600"
[admin]
listen = "127.0.0.1:19699"
[clusters.default]
upstreams = ["127.0.0.1:19501", "127.0.0.1:19502", "127.0.0.1:19503"]
TOML
    "$BIN" proxy --config "$WORK/proxy.toml" >"$WORK/proxy.log" 2>&1 &
    started+=($!)
    PIDS+=("${started[@]}")
    wait_port 19600
    "$BIN" loadgen --target http://127.0.0.1:19600/slow --rate 20 --duration 20s --timeout 300ms \
        >/dev/null 2>&1 &
    local slow=$!
    "$BIN" loadgen --target http://127.0.0.1:19600/fast --rate 60 --duration 20s --timeout 5s \
        --objective 100ms 2>&1 | awk '$1 == "phase" || $1 == "all"'
    wait "$slow" || true
    curl -s http://127.0.0.1:19699/clusters/default | python3 -c '
import json, sys
c = json.load(sys.stdin)
for o in c["outlier"]:
    print("replica %s: ejections %d, failures in a row %d"
          % (o["address"], o["ejections"], o["consecutive_failures"]))'
    for p in "${started[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$RUNS"); do
    echo "run $run, the fast endpoint:"
    one_run
done
