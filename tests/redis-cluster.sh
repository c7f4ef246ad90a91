# tests/redis-cluster.sh - a private Redis Cluster for a test script, sourced
# after tests/lib.sh:
#
#   . "$KV_TOP/tests/redis-cluster.sh"
#   cluster_start [PASSWORD] || { echo "# ...: skipped"; done_testing; exit; }
#   ... kvchunk --store "$CLUSTER_URL" ...
#   cluster_cli PORT args...     redis-cli on one node
#   cluster_wait_ok              until every live node says cluster_state:ok
#   cluster_stop                 stop every node (also done at exit)
#
# Three masters and three replicas (redis-server --cluster-enabled yes,
# joined by redis-cli --cluster create) on free loopback ports, files under
# $T, nothing saved, a node timeout of one second so that a failover takes
# seconds, CLUSTER_MAXMEMORY (64mb) per node.  CLUSTER_PORTS lists the
# ports, CLUSTER_PIDS the processes.
CLUSTER_PORTS=
CLUSTER_PIDS=
CLUSTER_URL=
CLUSTER_PASS=

cluster_stop() {
    for _p in $CLUSTER_PIDS; do
        kill -CONT "$_p" 2>/dev/null
        kill "$_p" 2>/dev/null
    done
    for _p in $CLUSTER_PIDS; do wait "$_p" 2>/dev/null; done
    CLUSTER_PIDS=
    return 0
}

cluster_cli() {
    _port=$1; shift
    if [ -n "$CLUSTER_PASS" ]; then
        REDISCLI_AUTH=$CLUSTER_PASS redis-cli -h 127.0.0.1 -p "$_port" "$@"
    else
        redis-cli -h 127.0.0.1 -p "$_port" "$@"
    fi
}

# The port of the master serving hash slot $1, as the first live node
# that answers sees it.
cluster_master_of() {
    for _q in $CLUSTER_PORTS; do
        _m=$(cluster_cli "$_q" cluster slots 2>/dev/null | awk -v s="$1" '
            { v[NR] = $0 }
            END {
                # flat reply: start, end, ip, port, id, then the replicas
                for (i = 1; i + 3 <= NR; i++)
                    if (v[i] ~ /^[0-9]+$/ && v[i + 1] ~ /^[0-9]+$/ &&
                        v[i + 2] ~ /\./ && v[i] + 0 <= s && s <= v[i + 1] + 0) {
                        print v[i + 3]; exit
                    }
            }')
        if [ -n "$_m" ]; then echo "$_m"; return 0; fi
    done
    return 1
}

cluster_wait_ok() {   # [seconds]
    _limit=$(( ${1:-20} * 10 ))
    _i=0
    while [ $_i -lt $_limit ]; do
        _bad=0
        for _port in $CLUSTER_PORTS; do
            _s=$(cluster_cli "$_port" cluster info 2>/dev/null | tr -d '\r' |
                sed -n 's/^cluster_state://p')
            [ -z "$_s" ] && continue          # dead or stopped node
            [ "$_s" = ok ] || _bad=1
        done
        [ $_bad = 0 ] && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

cluster_start() {   # [password]
    command -v redis-server >/dev/null 2>&1 || return 1
    command -v redis-cli >/dev/null 2>&1 || return 1
    CLUSTER_PASS=${1:-}
    CLUSTER_PORTS=
    CLUSTER_PIDS=
    mkdir -p "$T/cluster"
    trap 'cluster_stop; rm -rf "$T"' EXIT
    _r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    _base=$((20000 + _r % 30000))
    for _k in 0 1 2 3 4 5; do
        _port=$((_base + _k))
        _tries=0
        while :; do
            mkdir -p "$T/cluster/$_port"
            set -- --port "$_port" --bind 127.0.0.1 -::1 --dir "$T/cluster/$_port" \
                --save '' --appendonly no --daemonize no \
                --logfile "$T/cluster/$_port/log" --cluster-enabled yes \
                --cluster-config-file "$T/cluster/$_port/nodes.conf" \
                --cluster-node-timeout 1000 \
                --maxmemory "${CLUSTER_MAXMEMORY:-64mb}" \
                --maxmemory-policy allkeys-lru
            [ -n "$CLUSTER_PASS" ] && set -- "$@" --requirepass "$CLUSTER_PASS" \
                --masterauth "$CLUSTER_PASS"
            redis-server "$@" >/dev/null 2>&1 &
            _pid=$!
            _i=0
            while [ $_i -lt 30 ] && kill -0 "$_pid" 2>/dev/null &&
                [ "$(cluster_cli "$_port" ping 2>/dev/null)" != PONG ]; do
                sleep 0.1; _i=$((_i + 1))
            done
            if [ "$(cluster_cli "$_port" ping 2>/dev/null)" = PONG ]; then
                break
            fi
            kill "$_pid" 2>/dev/null
            _tries=$((_tries + 1))
            [ $_tries -lt 5 ] || return 1
            _port=$((_port + 1000))
        done
        CLUSTER_PIDS="$CLUSTER_PIDS $_pid"
        CLUSTER_PORTS="$CLUSTER_PORTS $_port"
    done
    CLUSTER_PORTS=${CLUSTER_PORTS# }
    _nodes=
    for _port in $CLUSTER_PORTS; do _nodes="$_nodes 127.0.0.1:$_port"; done
    cluster_cli "${CLUSTER_PORTS%% *}" --cluster create $_nodes \
        --cluster-replicas 1 --cluster-yes >"$T/cluster/create.log" 2>&1 || return 1
    cluster_wait_ok 30 || return 1
    _seeds=$(echo "$CLUSTER_PORTS" | awk '{ printf "127.0.0.1:%s,127.0.0.1:%s", $1, $2 }')
    if [ -n "$CLUSTER_PASS" ]; then
        CLUSTER_URL="redis-cluster://:$CLUSTER_PASS@$_seeds"
    else
        CLUSTER_URL="redis-cluster://$_seeds"
    fi
    return 0
}
