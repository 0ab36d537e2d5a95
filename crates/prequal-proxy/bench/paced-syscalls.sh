#!/usr/bin/env bash
# The system calls and context switches per request of the prequal proxy and of HAProxy at a
# paced rate (wrk, 10 connections each pausing 10 ms between requests: about 1000 requests/s,
# the latency measurement of bench-proxy.sh), in front of the same two trivial backends on
# 127.0.0.1, counted by `perf stat` over one run of $DURATION seconds each. Where cpu-split.sh
# counts flat out, this shows what a request costs when the proxy's threads sleep between
# requests.
#
# Needs wrk, haproxy and perf (`apt-get install -y wrk haproxy linux-perf`; the benchmark only).
# Usage: crates/prequal-proxy/bench/paced-syscalls.sh [POLICY]   (env: DURATION=6)
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=common.sh
source crates/prequal-proxy/bench/common.sh

POLICY=${1:-round-robin}
DURATION=${DURATION:-6}
TARGET=${CARGO_TARGET_DIR:-target}
B1=19401 B2=19402 PROXY=19480 HAPROXY=19481
EVENTS=epoll_wait,read,write,recvfrom,sendto,epoll_ctl,futex

for tool in wrk haproxy perf; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk haproxy linux-perf" >&2; exit 1; }
done
start_backends

printf 'function delay() return 10 end\n' >"$WORK/pace.lua"
haproxy_config "$HAPROXY" "$B1" "$B2" >"$WORK/haproxy.cfg"

# Prints one row for the process $2 serving on port $3, named $1.
measure() {
    local list out requests
    list=$(echo "$EVENTS" | sed 's/\([a-z_]*\)/syscalls:sys_enter_\1/g'),context-switches
    perf stat -e "$list" -p "$2" -x, -o "$WORK/perf.txt" -- sleep "$DURATION" &
    local perf=$!
    out=$(wrk -t1 -c10 -d"${DURATION}s" -s "$WORK/pace.lua" "http://127.0.0.1:$3/")
    wait $perf
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    awk -F, -v name="$1" -v r="$requests" -v events="$EVENTS" '
        { sub("syscalls:sys_enter_", "", $3); count[$3] = $1 }
        END {
            printf "| %-24s | %8d |", name, r
            n = split(events, e, ",")
            for (i = 1; i <= n; i++) printf " %6.3f |", count[e[i]] / r
            printf " %6.3f |\n", count["context-switches"] / r
        }' "$WORK/perf.txt"
}

echo "wrk paced, 10 connections each pausing 10 ms, ${DURATION}s each; $(nproc) cores; per request:"
printf "| %-24s | %8s |" contender requests
for e in ${EVENTS//,/ }; do printf " %6s |" "$e"; done
echo " context switches |"
measure_both
