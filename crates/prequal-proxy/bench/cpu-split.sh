#!/usr/bin/env bash
# Where a proxied request's CPU goes, the prequal proxy against HAProxy: user and system CPU
# per request (from /proc/PID/stat), system calls and context switches per request (perf stat,
# tracepoint raw_syscalls:sys_enter), over one flat-out wrk run each on 127.0.0.1, in front of
# the same two trivial backends as bench-proxy.sh.
#
# Needs wrk, haproxy and perf (`apt-get install -y wrk haproxy linux-perf`; the benchmark only).
# Usage: crates/prequal-proxy/bench/cpu-split.sh [POLICY]   (env: DURATION=6 CONNS=32)
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=common.sh
source crates/prequal-proxy/bench/common.sh

POLICY=${1:-round-robin}
DURATION=${DURATION:-6}
CONNS=${CONNS:-32}
TARGET=${CARGO_TARGET_DIR:-target}
B1=19301 B2=19302 PROXY=19380 HAPROXY=19381

for tool in wrk haproxy perf; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk haproxy linux-perf" >&2; exit 1; }
done
start_backends

haproxy_config "$HAPROXY" "$B1" "$B2" >"$WORK/haproxy.cfg"

# Prints one row for the process $2 serving on port $3, named $1.
measure() {
    local hz before after out requests
    hz=$(getconf CLK_TCK)
    before=$(awk '{print $14, $15}' "/proc/$2/stat")
    perf stat -e raw_syscalls:sys_enter,context-switches -p "$2" -x, -o "$WORK/perf.txt" -- sleep "$DURATION" &
    local perf=$!
    out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$3/")
    wait $perf
    after=$(awk '{print $14, $15}' "/proc/$2/stat")
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -F, -v name="$1" -v r="$requests" -v hz="$hz" -v b="$before" -v a="$after" '
        $3 == "raw_syscalls:sys_enter" {sys = $1} $3 == "context-switches" {cs = $1}
        END {
            split(b, x, " "); split(a, y, " ")
            printf "| %-24s | %9d | %10.1f | %12.1f | %15.2f | %18.3f |\n", name, r,
                (y[1] - x[1]) / hz / r * 1e6, (y[2] - x[2]) / hz / r * 1e6, sys / r, cs / r
        }' "$WORK/perf.txt"
}

echo "wrk flat out, $CONNS connections, ${DURATION}s each; $(nproc) cores"
echo "| contender                | requests  | user µs/req | system µs/req | syscalls/request | context switches/req |"
echo "|--------------------------|-----------|------------|--------------|-----------------|--------------------|"
measure_both
