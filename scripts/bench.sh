#!/usr/bin/env bash
# Rebuilds in release mode and prints the headline figures of docs/performance.md, each under
# the exact command that produced it, so anyone can check a figure against this machine.
#
#   scripts/bench.sh [SECTION...]     SECTION: sim, core, tracker, tower, proxy, all (default: sim core)
#
# sim      full-size prequal-ramp (as shipped, and prequal alone): wall, CPU, events, events/s
# core     per-query policy cost and load-tracker cost (criterion)
# tracker  the replica-side tracker under a tower layer (criterion)
# tower    prequal-tower against tower's p2c (in-process, about 2 minutes)
# proxy    proxy overhead and requests per CPU-second against HAProxy and nginx (needs wrk,
#          haproxy, curl; DURATION and RUNS as for crates/prequal-proxy/bench/bench-proxy.sh)
#
# Figures move with the machine's load: the first line says what else was running.
set -euo pipefail
cd "$(dirname "$0")/.."

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(sim core)
[ "${sections[0]}" = all ] && sections=(sim core tracker tower proxy)
for s in "${sections[@]}"; do
    case "$s" in
        sim | core | tracker | tower | proxy) ;;
        *)
            echo "scripts/bench.sh: unknown section '$s' (sim, core, tracker, tower, proxy, all)" >&2
            exit 2
            ;;
    esac
done

echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), \
$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "\$ cargo build --release -p prequal"
cargo build --release -q -p prequal
bin=target/release/prequal
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Runs a command with bash's `time`, printing the command first and the wall and CPU seconds
# after; sets WALL and CPU.
timed() {
    echo "\$ $*"
    local TIMEFORMAT='%R %U %S'
    local t
    t=$( { time "$@" > "$tmp/out.json" 2> "$tmp/err.log"; } 2>&1 ) || {
        cat "$tmp/err.log" >&2
        return 1
    }
    read -r WALL user sys <<< "$t"
    CPU=$(python3 -c "print(round($user + $sys, 2))")
}

# Sums the events of every run in the JSON report `prequal sim --json` printed.
events() {
    python3 -c "import json,sys; print(sum(r['events'] for r in json.load(open(sys.argv[1]))['runs']))" "$tmp/out.json"
}

sim() {
    echo
    echo "## Simulator: full-size prequal-ramp (docs/performance.md, Simulator)"
    timed "$bin" sim scenarios/prequal-ramp.toml --no-plots --json --out "$tmp/shipped"
    local ev
    ev=$(events)
    echo "as shipped (2 contenders, in parallel): ${WALL} s wall, ${CPU} s CPU, ${ev} events, \
$(python3 -c "print(round($ev / $CPU / 1e6, 2))") M events per CPU-second (target: at most 10 s wall)"
    sed 's|^contenders = .*|contenders = ["prequal"]|' scenarios/prequal-ramp.toml > "$tmp/ramp-prequal.toml"
    echo "(ramp-prequal.toml: scenarios/prequal-ramp.toml with contenders = [\"prequal\"])"
    timed "$bin" sim "$tmp/ramp-prequal.toml" --no-plots --json --out "$tmp/alone"
    ev=$(events)
    echo "prequal alone: ${WALL} s wall, ${CPU} s CPU, ${ev} events, \
$(python3 -c "print(round($ev / $CPU / 1e6, 2))") M events per CPU-second (target: at least 10 M)"
}

criterion() {
    echo "\$ cargo bench $*"
    if ! cargo bench -q "$@" > "$tmp/bench.out" 2> "$tmp/bench.err"; then
        cat "$tmp/bench.err" >&2
        return 1
    fi
    grep -E '^[A-Za-z0-9_/.+ (),:=-]+$|time:' "$tmp/bench.out" | grep -B1 'time:' | grep -v '^--$'
}

core() {
    echo
    echo "## Core: load tracker and per-query policy cost (docs/performance.md, Core)"
    criterion -p prequal-core --bench estimator -- --warm-up-time 1 --measurement-time 3
    criterion -p prequal-core --bench policies -- --warm-up-time 1 --measurement-time 3
}

tracker() {
    echo
    echo "## Replica side: tracker under a tower layer (docs/performance.md, Replica side)"
    criterion -p prequal-server --bench tracker -- --warm-up-time 1 --measurement-time 3
}

tower() {
    echo
    echo "## prequal-tower against tower p2c (docs/performance.md)"
    echo "\$ cargo run --release -p prequal-tower --example compare"
    cargo run --release -q -p prequal-tower --example compare
}

proxy() {
    echo
    echo "## Proxy: added latency and requests per CPU-second against HAProxy and nginx"
    echo "\$ DURATION=${DURATION:-10} RUNS=${RUNS:-3} crates/prequal-proxy/bench/bench-proxy.sh"
    DURATION=${DURATION:-10} RUNS=${RUNS:-3} crates/prequal-proxy/bench/bench-proxy.sh
}

for s in "${sections[@]}"; do
    "$s"
done
