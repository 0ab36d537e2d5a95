# Sourced by the proxy benchmarks, from the repository's root: a scratch directory ($WORK) and
# the processes started ($PIDS), both cleaned up on exit; wait_port; and the HAProxy config
# they compare with.
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

# wait_port PORT [TENTHS]: waits until something listens on 127.0.0.1:PORT, at most TENTHS
# tenths of a second (default 100), else exits.
wait_port() {
    local tries=${2:-100}
    for _ in $(seq "$tries"); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "port $1 never opened" >&2
    exit 1
}

# start_backends: builds the benchmarks' examples (the trivial backend and the zero-config
# proxy), starts the backend on 127.0.0.1:$B1 and :$B2 and waits until both listen.
start_backends() {
    cargo build --release -q -p prequal-proxy --example bench_backend --example zero_config
    local port
    for port in "$B1" "$B2"; do
        "$TARGET/release/examples/bench_backend" "127.0.0.1:$port" >/dev/null 2>&1 &
        PIDS+=($!)
    done
    wait_port "$B1"
    wait_port "$B2"
}

# haproxy_config LISTEN_PORT BACKEND_PORT... prints the HAProxy the benchmarks compare with:
# HTTP round robin over the backends on 127.0.0.1, upstream connections reused
# (`http-reuse always`), its default of one thread per core.
haproxy_config() {
    local listen=$1 port n=0
    shift
    cat <<CFG
global
    maxconn 4096
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:$listen
    default_backend be
backend be
    balance roundrobin
    http-reuse always
CFG
    for port in "$@"; do
        n=$((n + 1))
        echo "    server s$n 127.0.0.1:$port"
    done
}

# measure_both: calls `measure NAME PID PORT` (defined by the caller) for the prequal proxy
# (the zero-config example, policy $POLICY, one data-plane thread per core, over the backends
# on $B1 and $B2, listening on $PROXY), then for HAProxy (config $WORK/haproxy.cfg, listening
# on $HAPROXY), each started fresh and the proxy stopped before HAProxy starts.
measure_both() {
    local proxy haproxy
    PREQUAL_WORKERS=0 "$TARGET/release/examples/zero_config" "127.0.0.1:$PROXY" "$POLICY" \
        "127.0.0.1:$B1" "127.0.0.1:$B2" >/dev/null 2>&1 &
    PIDS+=($!); proxy=$!
    wait_port "$PROXY"
    measure "prequal ($POLICY)" "$proxy" "$PROXY"
    kill "$proxy"
    haproxy -db -f "$WORK/haproxy.cfg" >/dev/null 2>&1 &
    PIDS+=($!); haproxy=$!
    wait_port "$HAPROXY"
    measure "haproxy $(haproxy -v | awk 'NR==1 {print $3}')" "$haproxy" "$HAPROXY"
}
