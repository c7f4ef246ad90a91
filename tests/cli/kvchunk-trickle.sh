#!/bin/sh
# kvchunk-trickle.sh - --timeout bounds each Redis command as a whole, not
# each read.  A fault injector (not a Redis: a few lines of Python on
# 127.0.0.1, a free port) answers every command with the head of a bulk
# string of a million bytes and then one byte every 50 ms, each byte well
# inside the timeout, for five seconds, then hangs up; it answers
# CLUSTER SLOTS with itself as the master of every slot, so that the
# cluster store gets as far as its commands.  Every subcommand that talks
# to the store must fail with "no answer within 0.2 s" (not "Server closed
# the connection", which is what reading byte by byte until the end says).
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
if ! command -v python3 >/dev/null 2>&1; then
    echo "# no python3: skipped"
    done_testing
    exit 0
fi

cat >trickle.py <<'EOF'
import os, socket, sys, threading, time
portfile, step, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(('127.0.0.1', 0))
srv.listen(16)
port = srv.getsockname()[1]
with open(portfile + '.tmp', 'w') as f:
    f.write('%d\n' % port)
os.rename(portfile + '.tmp', portfile)
host = b'127.0.0.1'
slots = (b'*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%d\r\n%s\r\n:%d\r\n'
         % (len(host), host, port))
def serve(c):
    try:
        while True:
            d = c.recv(1 << 20)
            if not d:
                return
            if b'SLOTS' in d.upper():
                c.sendall(slots)
                continue
            c.sendall(b'$1000000\r\n')
            for _ in range(count):
                time.sleep(step)
                c.sendall(b'x')
            return
    except OSError:
        pass
    finally:
        c.close()
srv.settimeout(60)
while True:
    try:
        c, _ = srv.accept()
    except socket.timeout:
        break
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
python3 trickle.py port 0.05 100 &
SRV=$!
trap 'kill $SRV 2>/dev/null; rm -rf "$T"' EXIT
i=0
while [ ! -s port ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
P=$(cat port)
M="--shape 2,2,32 --dtype f32 --model trickle --chunk-context none"
seq 1 16 >s.tok
ok 'toy KV' kvchunk toy $M --tokens s.tok --pos 0 -o s.npy
key=$(kvchunk key $M --tokens s.tok)
printf 'Sys.##A chunk.##?' >p.txt

for url in "redis://127.0.0.1:$P" "redis-cluster://127.0.0.1:$P"; do
    name=${url%%:*}
    run() {  # title, subcommand and options
        _what=$1
        shift
        expect_fail 1 "$name: $_what: fails" kvchunk "$@" --store "$url" \
            --timeout 0.2
        expect_eq "$name: $_what: within the timeout, said so" \
            "$(grep -c 'no answer within 0.2 s' "$T/.err")" 1
    }
    run get get $M --tokens s.tok --at 5
    run assemble assemble $M -f text p.txt
    run put put $M --tokens s.tok --kv s.npy --base-pos 0
    run ls ls
    run stat stat
    run fsck fsck
    run rm rm "$key"
    # the announced million bytes are more than --max-mem: refused at once
    expect_fail 1 "$name: a reply longer than --max-mem: refused" kvchunk get \
        $M --tokens s.tok --at 5 --store "$url" --timeout 0.2 --max-mem 100K
    expect_eq "$name:   ... naming its size" \
        "$(grep -c 'a blob of 1000000 bytes, more than --max-mem 102400' "$T/.err")" 1
done

done_testing
