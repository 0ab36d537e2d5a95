#!/usr/bin/env bash
# The proxy's CPU per request at a moderate, paced rate, where every probe the policy asks for
# is sent (flat out, `bench-proxy.sh` measures a proxy whose probes are mostly held back by
# `max_probes_per_replica`). wrk with $CONNS connections each pausing 10 ms between requests
# (about 100 requests/s per connection) through the zero-config proxy over $REPLICAS trivial
# backends, all on 127.0.0.1, for $DURATION seconds; the proxy's user + system CPU from /proc
# over the run, and its probes from /metrics.
#
# Usage: crates/prequal-proxy/bench/paced-cpu.sh POLICY...   (env: DURATION=10 CONNS=40
# REPLICAS=4 PIGGYBACK=1 (the backends put their load on every response, as `prequal sidecar
# --piggyback` does)). A POLICY is a name or a TOML inline table without spaces, such as
# '{name="prequal",probe_rate=2}'. Each policy runs once, in the order given; repeat and
# interleave them to see the machine's noise. Needs wrk and curl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=common.sh
source crates/prequal-proxy/bench/common.sh
DURATION=${DURATION:-10}
CONNS=${CONNS:-40}
REPLICAS=${REPLICAS:-4}
TARGET=${CARGO_TARGET_DIR:-target}
PROXY=19480 ADMIN=19482 FIRST=19401
[ $# -gt 0 ] || { echo "usage: $0 POLICY..." >&2; exit 2; }
for tool in wrk curl; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk curl" >&2; exit 1; }
done
cargo build --release -q -p prequal-proxy --example bench_backend --example zero_config
cat >"$WORK/pace.lua" <<'LUA'
function delay() return 10 end
LUA
upstreams=()
for i in $(seq 0 $((REPLICAS - 1))); do
    port=$((FIRST + i))
    "$TARGET/release/examples/bench_backend" "127.0.0.1:$port" >/dev/null 2>&1 &
    PIDS+=($!)
    upstreams+=("127.0.0.1:$port")
done
for u in "${upstreams[@]}"; do wait_port "${u##*:}"; done
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg);" \
    "$REPLICAS backends, piggyback ${PIGGYBACK:-0}, wrk $CONNS connections paced 10 ms, ${DURATION}s"
tck=$(getconf CLK_TCK)
for policy in "$@"; do
    PREQUAL_ADMIN="127.0.0.1:$ADMIN" "$TARGET/release/examples/zero_config" "127.0.0.1:$PROXY" \
        "$policy" "${upstreams[@]}" >"$WORK/proxy.log" 2>&1 &
    px=$!
    PIDS+=("$px")
    wait_port $PROXY
    wait_port $ADMIN
    cpu() { awk '{print $14 + $15}' "/proc/$px/stat"; }
    probes() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk '/^prequal_proxy_probes_total/ {s += $NF} END {print s + 0}'; }
    c0=$(cpu); p0=$(probes)
    out=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$WORK/pace.lua" "http://127.0.0.1:$PROXY/" 2>&1)
    c1=$(cpu); p1=$(probes)
    kill "$px"; wait "$px" 2>/dev/null || true
    req=$(echo "$out" | awk '/requests in/ {print $1}')
    python3 - "$policy" "$req" "$c0" "$c1" "$tck" "$p0" "$p1" <<'PY'
import sys
policy, req, c0, c1, tck, p0, p1 = sys.argv[1], *map(float, sys.argv[2:])
cpu = (c1 - c0) / tck
print(f"{policy}: {req:.0f} requests, proxy CPU {cpu:.2f} s, {1e6 * cpu / req:.1f} us per request, "
      f"{(p1 - p0) / req:.2f} probes per request")
PY
done
