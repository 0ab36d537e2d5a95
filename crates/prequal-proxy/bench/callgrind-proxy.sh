#!/usr/bin/env bash
# Instructions per proxied request, a measure that stays stable on a shared machine: the proxy
# (the zero-config example, one data-plane thread) runs under callgrind in front of two trivial
# backends on 127.0.0.1 while wrk sends requests through it for $DURATION; the total instruction
# count (start-up included, small against the requests) divided by the requests served.
#
# Needs valgrind and wrk (`apt-get install -y valgrind wrk`; the benchmark only).
# Usage: crates/prequal-proxy/bench/callgrind-proxy.sh [POLICY]   (env: DURATION=10s CONNS=8)
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=common.sh
source crates/prequal-proxy/bench/common.sh

POLICY=${1:-round-robin}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-8}
TARGET=${CARGO_TARGET_DIR:-target}
B1=19201 B2=19202 PROXY=19280

for tool in valgrind wrk; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y valgrind wrk" >&2; exit 1; }
done
start_backends

PREQUAL_WORKERS=1 valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" \
    "$TARGET/release/examples/zero_config" "127.0.0.1:$PROXY" "$POLICY" "127.0.0.1:$B1" "127.0.0.1:$B2" \
    >"$WORK/proxy.log" 2>&1 &
proxy=$!
wait_port $PROXY 200
wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$PROXY/" >"$WORK/wrk.txt"
# SIGINT: the proxy drains and exits, and callgrind writes its counts.
kill -INT "$proxy"; wait "$proxy" || true
requests=$(awk '/ requests in /{print $1}' "$WORK/wrk.txt")
instructions=$(awk '/^summary:/{print $2}' "$WORK/callgrind.out")
echo "policy $POLICY: $requests requests, $instructions instructions, $((instructions / requests)) per request"
