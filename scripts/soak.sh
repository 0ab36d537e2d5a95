#!/usr/bin/env bash
# Soak and leak check of the proxy: scripts/soak.sh [MINUTES] (default 30).
#
# Runs `prequal proxy` at 2,000 requests/s (open loop, `prequal loadgen`) for MINUTES over four
# emulated replicas at 5 ms, each its own `prequal backend` process, with churn:
#   - every 10 s the upstreams file is rewritten, alternately without and with the fourth replica;
#   - every 60 s the config file is rewritten (a new comment), which reloads it;
#   - every 5 min (from the 2nd minute) the first replica is killed (-9) and restarted 5 s later.
# Every 10 s it samples the proxy's resident memory and open file descriptors. At the end it
# prints the samples' range and linear slope after a one-minute warm-up, the growth from the
# first sample after warm-up to the last, and the errors and timeouts the load generator saw,
# split into those in the kill windows (kill to restart plus 5 s) and the rest.
#
# Target (docs/performance.md): memory and descriptors flat (within 10% after warm-up), no error
# outside the kill windows. Everything runs on 127.0.0.1; every process it starts is stopped on
# exit. Needs python3 for the final arithmetic. Env: RATE (2000), BASE_PORT (19300), BIN (a
# prequal binary to run instead of building target/release/prequal).
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=${1:-30}
RATE=${RATE:-2000}
BASE=${BASE_PORT:-19300}
PROXY_PORT=$((BASE + 80)) ADMIN_PORT=$((BASE + 81))
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}" ${REPLICA_PIDS[@]+"${REPLICA_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p prequal
    BIN=target/release/prequal
fi

declare -a REPLICA_PIDS
start_replica() { # index
    local i=$1
    "$BIN" backend --replicas 1 --base-port $((BASE + 1 + i)) --latency 5ms --seed $((i + 1)) \
        >>"$WORK/backend-$i.log" 2>&1 &
    REPLICA_PIDS[$i]=$!
}
for i in 0 1 2 3; do start_replica "$i"; done

upstreams() { # count
    for i in $(seq 0 $(($1 - 1))); do echo "127.0.0.1:$((BASE + 1 + i))"; done
}
upstreams 4 >"$WORK/upstreams.new" && mv "$WORK/upstreams.new" "$WORK/upstreams.txt"
write_config() { # reload number
    cat >"$WORK/prequal.new" <<EOF
# soak config, reload $1
[server]
listen = "127.0.0.1:$PROXY_PORT"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[clusters.soak]
upstreams_file = "$WORK/upstreams.txt"
discovery_interval = "1s"
EOF
    mv "$WORK/prequal.new" "$WORK/prequal.toml"
}
write_config 0
sleep 1
RUST_LOG=warn "$BIN" proxy --config "$WORK/prequal.toml" --watch-interval 1s >"$WORK/proxy.log" 2>&1 &
PROXY=$!
PIDS+=("$PROXY")
for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$ADMIN_PORT/ready" 2>/dev/null && break
    sleep 0.1
done

"$BIN" loadgen --target "http://127.0.0.1:$PROXY_PORT/" --rate "$RATE" --duration "${MINUTES}m" \
    --timeout 5s --json "$WORK/load.json" >"$WORK/loadgen.log" 2>&1 &
LOADGEN=$!
PIDS+=("$LOADGEN")
START=$(date +%s)
echo "soak: ${MINUTES} min at ${RATE}/s through prequal proxy (pid $PROXY); samples every 10 s"
echo "t_s rss_kb fds" >"$WORK/samples.txt"
: >"$WORK/kills.txt"
step=0
while kill -0 "$LOADGEN" 2>/dev/null; do
    sleep 10
    step=$((step + 1))
    t=$(($(date +%s) - START))
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$PROXY/status" 2>/dev/null || echo 0)
    fds=$(find "/proc/$PROXY/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    echo "$t $rss $fds" >>"$WORK/samples.txt"
    echo "  t=${t}s rss=${rss} kB fds=${fds}"
    # Discovery churn: the fourth replica leaves and comes back.
    if ((step % 2 == 1)); then upstreams 3; else upstreams 4; fi >"$WORK/upstreams.new"
    mv "$WORK/upstreams.new" "$WORK/upstreams.txt"
    if ((step % 6 == 0)); then write_config "$step"; fi
    if ((step % 30 == 12)); then
        kill -9 "${REPLICA_PIDS[0]}" 2>/dev/null || true
        echo "$t $((t + 10))" >>"$WORK/kills.txt"
        echo "  t=${t}s killed replica 0; restarting it in 5 s"
        sleep 5
        start_replica 0
    fi
done
wait "$LOADGEN" || true

python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
rows = [list(map(float, l.split())) for l in open(f"{work}/samples.txt").read().splitlines()[1:]]
rows = [r for r in rows if r[0] >= 60] or rows
def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs) or 1.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den
t = [r[0] for r in rows]
for name, col, unit in (("memory (RSS)", 1, "kB"), ("file descriptors", 2, "")):
    ys = [r[col] for r in rows]
    growth = 100.0 * (ys[-1] - ys[0]) / ys[0] if ys[0] else 0.0
    print(f"{name}: {min(ys):.0f} to {max(ys):.0f} {unit}, slope {slope(t, ys) * 60:+.1f} {unit}/min, "
          f"first to last after warm-up {growth:+.1f}%")
kills = [tuple(map(float, l.split())) for l in open(f"{work}/kills.txt").read().splitlines()]
report = json.load(open(f"{work}/load.json"))
inside = outside = 0
for s in report["measured"]["per_second"]:
    bad = s["errors"] + s["timeouts"]
    if any(a - 1 <= s["t"] <= b for a, b in kills):
        inside += bad
    else:
        outside += bad
print(f"queries {report['sent']}, successes {report['successes']}; errors+timeouts in kill windows "
      f"{inside}, outside {outside}; max send lag {report['max_send_lag_ms']:.1f} ms")
PY
