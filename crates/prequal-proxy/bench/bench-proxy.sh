#!/usr/bin/env bash
# Proxy overhead benchmark, in one run: wrk against a trivial backend directly, through
# the prequal proxy (once per policy in $POLICIES; the library's zero-config example, the same
# data path as `prequal proxy --listen`), through HAProxy, and through nginx when it is
# installed (skipped with a note otherwise), all on 127.0.0.1.
#
# Two measurements per contender:
#  1. latency at about 1000 rps: wrk with 10 connections, each pausing 10 ms between requests
#     (wrk has no fixed-rate mode, so the rate is ~1000 rps minus the service time); p50 and p99
#     minus the direct run's are the latency the proxy adds;
#  2. the maximum rate: wrk flat out with $CONNS connections; requests served divided by the
#     proxy's CPU seconds (user + system, from /proc, over the process and its children, so
#     nginx's workers count) over the run. For prequal, the
#     proxy's own /metrics give the probes sent per request in that run.
#
# The whole set runs $RUNS times, contenders interleaved, so that load from elsewhere on the
# machine hits them alike; each run's table is printed, then the median of every column.
#
# Needs wrk, haproxy and curl (`apt-get install -y wrk haproxy curl`; for the benchmark only,
# never for the tests). Usage: crates/prequal-proxy/bench/bench-proxy.sh   (env: DURATION=15
# CONNS=32 RUNS=3 POLICIES="prequal round-robin" WORKERS=0 (proxy data-plane threads, 0 = one
# per core) PIGGYBACK=1 (the backends put their load on every response, as `prequal sidecar
# --piggyback` does)). A policy in POLICIES is a name or a TOML inline table without spaces:
# POLICIES='prequal {name="prequal",probe_rate=2}'.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# shellcheck source=common.sh
source crates/prequal-proxy/bench/common.sh

DURATION=${DURATION:-15}
RUNS=${RUNS:-3}
CONNS=${CONNS:-32}
POLICIES=${POLICIES:-"prequal round-robin"}
TARGET=${CARGO_TARGET_DIR:-target}
B1=19101 B2=19102 PROXY=19180 HAPROXY=19181 ADMIN=19182 NGINX=19183

for tool in wrk haproxy curl; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk haproxy curl" >&2; exit 1; }
done
cargo build --release -q -p prequal-proxy --example bench_backend --example zero_config

start() { "$@" >"$WORK/log.$BASHPID.$RANDOM" 2>&1 & PIDS+=($!); LAST=$!; }

start "$TARGET/release/examples/bench_backend" "127.0.0.1:$B1"
start "$TARGET/release/examples/bench_backend" "127.0.0.1:$B2"
wait_port $B1; wait_port $B2

cat >"$WORK/pace.lua" <<'LUA'
function delay() return 10 end
LUA
haproxy_config "$HAPROXY" "$B1" "$B2" >"$WORK/haproxy.cfg"

NGINX_NAME=""
if command -v nginx >/dev/null; then
    NGINX_NAME="nginx $(nginx -v 2>&1 | sed 's|.*/||')"
    mkdir -p "$WORK/nginx"
    cat >"$WORK/nginx.conf" <<CFG
daemon off;
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    upstream be {
        server 127.0.0.1:$B1;
        server 127.0.0.1:$B2;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$NGINX;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CFG
else
    echo "nginx not installed: its rows are skipped (apt-get install -y nginx)"
fi

# Prints "p50_us p99_us rps" from a paced wrk run.
paced() {
    local out
    out=$(wrk -t1 -c10 -d"${DURATION}s" --latency -s "$WORK/pace.lua" "http://127.0.0.1:$1/")
    echo "$out" | awk '
        function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
        $1=="50%" {p50=us($2)} $1=="99%" {p99=us($2)} $1=="Requests/sec:" {rps=$2}
        END {printf "%.0f %.0f %.0f\n", p50, p99, rps}'
}

# CPU ticks of a process and its children (nginx's workers): "user system".
ticks() {
    local user=0 system=0 p u s
    for p in "$1" $(pgrep -P "$1" || true); do
        read -r u s < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo 0 0)
        user=$((user + u)); system=$((system + s))
    done
    echo "$user $system"
}

# Prints "rps requests cpu_seconds user_us_per_request system_us_per_request" from a flat-out
# wrk run, CPU measured on pid $2.
flat() {
    local u0 s0 u1 s1 out reqs
    read -r u0 s0 < <(ticks "$2")
    out=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$1/")
    read -r u1 s1 < <(ticks "$2")
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "$out" | awk -v reqs="$reqs" -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v hz="$(getconf CLK_TCK)" '
        $1=="Requests/sec:" {
            if (reqs > 0) { us = u / hz / reqs * 1e6; ss = s / hz / reqs * 1e6 } else { us = 0; ss = 0 }
            printf "%.0f %d %.2f %.1f %.1f\n", $2, reqs, (u + s) / hz, us, ss
        }'
}

# The sum of a counter family's samples in the proxy's /metrics (only those whose labels match
# the regular expression $2, if given).
counter() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" -v l="${2:-}" 'index($1, m) == 1 && $1 ~ l {s += $2} END {print s + 0}'; }
# Probes sent, answered or not (not the ones a bound kept back: skipped or dropped).
SENT='result="(ok|failed)"'

report() { # name port pid
    local probes="-" p0 r0 user system
    read -r p50 p99 rps < <(paced "$2")
    if [ "$1" = direct ]; then D50=$p50; D99=$p99; fi
    if [ -n "$3" ]; then
        if [ "$1" != "${1#prequal}" ]; then p0=$(counter prequal_proxy_probes_total "$SENT"); r0=$(counter prequal_proxy_requests_total); fi
        read -r max reqs cpu user system < <(flat "$2" "$3")
        per=$(awk -v r="$reqs" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", r / c; else print "n/a" }')
        if [ "$1" != "${1#prequal}" ]; then
            probes=$(awk -v p="$(counter prequal_proxy_probes_total "$SENT")" -v p0="$p0" -v r="$(counter prequal_proxy_requests_total)" -v r0="$r0" \
                'BEGIN { if (r > r0) printf "%.2f", (p - p0) / (r - r0); else print "n/a" }')
        fi
    else
        read -r max reqs cpu user system < <(flat "$2" "$$")
        per="-" user="-" system="-"
    fi
    local row
    row=$(printf "| %-24s | %6s | %6s | %9s | %9s | %7s | %19s | %11s | %13s | %17s |" "$1" "$p50" "$p99" \
        "$((p50 - D50))" "$((p99 - D99))" "$max" "$per" "$user" "$system" "$probes")
    echo "$row"
    echo "$row" >>"$WORK/rows"
}

header() {
    echo "| contender                | p50 us | p99 us | added p50 | added p99 | max rps | req per proxy CPU-s | user us/req | kernel us/req | probes per request |"
    echo "|--------------------------|--------|--------|-----------|-----------|---------|---------------------|-------------|---------------|--------------------|"
}

HAPROXY_NAME="haproxy $(haproxy -v | awk 'NR==1 {print $3}')"
echo "wrk paced ~1000 rps (10 conns x 10 ms think time) and flat out ($CONNS conns), ${DURATION}s each;"
echo "$(nproc) cores; proxy data-plane threads: ${WORKERS:-0} (0 = one per core); $RUNS runs; \
backends piggyback their load: $([ "${PIGGYBACK:-0}" = 1 ] && echo yes || echo no)"
for run in $(seq "$RUNS"); do
    echo
    echo "run $run"
    header
    report direct $B1 ""
    for policy in $POLICIES; do
        # The library in its zero-config form: the same data path as `prequal proxy --listen ...`.
        PREQUAL_WORKERS=${WORKERS:-0} PREQUAL_ADMIN="127.0.0.1:$ADMIN" start \
            "$TARGET/release/examples/zero_config" "127.0.0.1:$PROXY" "$policy" "127.0.0.1:$B1" "127.0.0.1:$B2"
        pid=$LAST
        wait_port $PROXY
        wait_port $ADMIN
        report "prequal ($policy)" $PROXY "$pid"
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
    start haproxy -db -f "$WORK/haproxy.cfg"
    pid=$LAST
    wait_port $HAPROXY
    report "$HAPROXY_NAME" $HAPROXY "$pid"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    if [ -n "$NGINX_NAME" ]; then
        start nginx -c "$WORK/nginx.conf" -p "$WORK/nginx"
        pid=$LAST
        wait_port $NGINX
        report "$NGINX_NAME" $NGINX "$pid"
        kill "$pid"; wait "$pid" 2>/dev/null || true
    fi
done

echo
echo "median of $RUNS runs"
header
# Median per contender and column (the rows are "| name | v | v | ... |").
awk -F'|' '
    { name = $2; names[name] = 1; n[name]++; for (c = 3; c < NF; c++) v[name, c, n[name]] = $c; cols = NF }
    END {
        for (name in names) order[++k] = name
        for (i = 1; i <= k; i++) {
            name = order[i]; line = "|" name "|"
            for (c = 3; c < cols; c++) {
                m = n[name]; cnt = 0
                for (j = 1; j <= m; j++) { x = v[name, c, j]; gsub(/ /, "", x); if (x != "-" && x != "n/a") a[++cnt] = x + 0 }
                for (p = 1; p <= cnt; p++) for (q = p + 1; q <= cnt; q++) if (a[q] < a[p]) { t = a[p]; a[p] = a[q]; a[q] = t }
                if (cnt == 0) med = "-"; else if (cnt % 2) med = a[(cnt + 1) / 2]; else med = (a[cnt / 2] + a[cnt / 2 + 1]) / 2
                # As many decimals as the runs printed (13.0 stays 13.0, not 13).
                first = v[name, c, 1]; gsub(/ /, "", first)
                if (cnt > 0 && index(first, ".") > 0) med = sprintf("%." (length(first) - index(first, ".")) "f", med)
                w = length(v[name, c, 1]) - 2
                line = line sprintf(" %" w "s |", med)
                delete a
            }
            print line
        }
    }' "$WORK/rows" | sort -t'|' -k2,2 -s
