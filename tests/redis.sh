# tests/redis.sh - a private redis-server for a test script, sourced after
# tests/lib.sh:
#
#   . "$KV_TOP/tests/redis.sh"
#   redis_start || { echo "# no redis-server: skipped"; done_testing; exit; }
#   ... kvchunk --store "$REDIS_URL" ...
#   redis_pause / redis_resume      SIGSTOP / SIGCONT the server (a hang)
#   redis_stop                      stop it (also done at exit)
#
# The server listens on 127.0.0.1 (and ::1 where it can) on a free port, keeps its files under $T,
# saves nothing to disk, and is stopped when the script exits.
REDIS_PID=
REDIS_PORT=
REDIS_URL=

redis_stop() {
    if [ -n "$REDIS_PID" ]; then
        kill -CONT "$REDIS_PID" 2>/dev/null
        kill "$REDIS_PID" 2>/dev/null
        wait "$REDIS_PID" 2>/dev/null
        REDIS_PID=
    fi
    return 0
}

redis_pause() { kill -STOP "$REDIS_PID"; }
redis_resume() { kill -CONT "$REDIS_PID"; }

redis_cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

redis_start() {
    command -v redis-server >/dev/null 2>&1 || return 1
    command -v redis-cli >/dev/null 2>&1 || return 1
    mkdir -p "$T/redis"
    trap 'redis_stop; rm -rf "$T"' EXIT
    for _try in 1 2 3 4 5 6 7 8 9 10; do
        _r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
        REDIS_PORT=$((20000 + _r % 40000))
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 -::1 \
            --dir "$T/redis" --save '' --appendonly no --daemonize no \
            --logfile "$T/redis/log" --maxmemory 256mb \
            --maxmemory-policy allkeys-lru >/dev/null 2>&1 &
        REDIS_PID=$!
        _i=0
        while [ $_i -lt 50 ]; do
            if ! kill -0 "$REDIS_PID" 2>/dev/null; then
                break                   # died: port taken, try another
            fi
            if [ "$(redis_cli ping 2>/dev/null)" = PONG ]; then
                REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
                return 0
            fi
            sleep 0.1
            _i=$((_i + 1))
        done
        redis_stop
    done
    return 1
}
