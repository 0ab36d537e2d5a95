# Sourced by the proxy benchmarks. haproxy_config LISTEN_PORT BACKEND_PORT... prints the HAProxy
# they compare with: HTTP round robin over the backends on 127.0.0.1, upstream connections
# reused (`http-reuse always`), its default of one thread per core.
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
