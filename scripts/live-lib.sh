# Shell functions the live scripts in this folder share; source it, do not run it.

# Waits until something listens on 127.0.0.1:PORT (at most 10 s), else exits the script.
wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "port $1 never opened" >&2
    exit 1
}
