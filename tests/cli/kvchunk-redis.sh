#!/bin/sh
# kvchunk-redis.sh - the redis:// store against a private redis-server:
# put/get/assemble, TTL, ls/stat, a flipped bit, fsck, and a server that
# hangs (SIGSTOP) or is gone: a clear error within the timeout, exit 1,
# nothing lost.
. "$KV_TOP/tests/lib.sh"
. "$KV_TOP/tests/redis.sh"
cd "$T" || exit 1
if ! redis_start; then
    echo "# no redis-server: skipped"
    done_testing
    exit 0
fi
R="$REDIS_URL"
D="dir:$T/store"
M="--shape 2,2,32 --dtype f32 --model redis-test"

tok() { printf '%s' "$2" | od -An -tu1 -v >"$1"; }
tok sys.tok 'System prompt.'
tok a.tok 'A chunk about rivers.'
tok b.tok 'Another chunk, about mountains.'
ls_=14
ok 'toy: sys' kvchunk toy $M --tokens sys.tok --pos 0 -o sys.npy
ok 'toy: A' kvchunk toy $M --tokens a.tok --pos $ls_ -o a.npy
ok 'toy: B' kvchunk toy $M --tokens b.tok --pos $ls_ -o b.npy
ka=$(kvchunk key $M --tokens a.tok --context sys.tok)
expect_out 'put to redis' "$ka stored" kvchunk put --store "$R" $M \
    --tokens a.tok --context sys.tok --kv a.npy --base-pos $ls_
expect_out 'put again: present (SET NX)' "$ka present" kvchunk put \
    --store "$R" $M --tokens a.tok --context sys.tok --kv a.npy \
    --base-pos $ls_
ok 'put to a dir store too' kvchunk put --store "$D" $M --tokens a.tok \
    --context sys.tok --kv a.npy --base-pos $ls_
ok 'get from redis at 500' kvchunk get --store "$R" $M --tokens a.tok \
    --context sys.tok --at 500 -o r.npy
ok 'get from dir at 500' kvchunk get --store "$D" $M --tokens a.tok \
    --context sys.tok --at 500 -o d.npy
expect_file_eq 'redis and dir give the same bytes' r.npy d.npy
expect_fail 3 'redis miss: exit 3' kvchunk get --store "$R" $M \
    --tokens b.tok --context sys.tok --at 0
ok 'put B with a TTL' kvchunk put --store "$R" $M --tokens b.tok \
    --context sys.tok --kv b.npy --base-pos $ls_ --ttl 1000
kb=$(kvchunk key $M --tokens b.tok --context sys.tok)
ttl=$(redis_cli ttl "kvc:1:$kb")
[ "$ttl" -gt 0 ] && [ "$ttl" -le 1000 ]
expect_eq "TTL set ($ttl s)" $? 0
ok 'put sys' kvchunk put --store "$R" $M --chunk-context none \
    --tokens sys.tok --kv sys.npy --base-pos 0
printf 'System prompt.##Another chunk, about mountains.##A chunk about rivers.##?' >p.txt
expect_out 'assemble from redis: pipelined GETs' 'sys 0 14 hit
chunk 14 31 hit
chunk 45 21 hit
question 66 1 miss' sh -c "kvchunk assemble --store '$R' $M -f text p.txt |
    cut -d' ' -f1-3,5"
ok 'ls' kvchunk ls --store "$R"
expect_eq 'ls: three entries' "$(wc -l <"$T/.out" | tr -d ' ')" 3
ok 'stat' kvchunk stat --store "$R"
expect_eq 'stat: entries and hits' "$(grep -E '^(entries|hits)' "$T/.out" |
    tr '\n' ' ')" 'entries: 3 hits: 4 '
# 2,500 more values (copies of B under other names): ls and stat read the
# heads of several SCAN replies, pipelined, and count what Redis holds
redis_cli eval "local b = redis.call('GET', KEYS[1])
    for i = 1, 2500 do redis.call('SET', string.format('kvc:1:%032x', i), b) end
    return 1" 1 "kvc:1:$kb" >/dev/null
want=$(redis_cli eval "local n, s = 0, 0
    for _, k in ipairs(redis.call('KEYS', 'kvc:1:*')) do
        if k ~= 'kvc:1:stats' then n = n + 1; s = s + redis.call('STRLEN', k) end
    end return n .. ' ' .. s" 0)
ok 'stat of 2,503 entries' kvchunk stat --store "$R"
expect_eq '  ... equals a count of the values and their lengths' \
    "$(sed -n 's/^entries: //p; s/^bytes: //p' "$T/.out" | tr '\n' ' ')" \
    "$want "
ok 'ls of 2,503 entries' kvchunk ls --store "$R"
expect_eq '  ... one line each, sizes as stat' \
    "$(awk '{ n++; s += $3 } END { print n, s }' "$T/.out")" "$want"
redis_cli eval "for i = 1, 2500 do
    redis.call('DEL', string.format('kvc:1:%032x', i)) end return 1" 0 \
    >/dev/null
expect_fail 1 'evict is Redis business' kvchunk evict --store "$R" \
    --max-size 1M
expect_fail 2 'put --pin to Redis: refused before storing' kvchunk put \
    --store "$R" $M --tokens a.tok --context sys.tok --kv a.npy \
    --base-pos $ls_ --pin

# The KV itself, each hit moved as its reply streams in, against a dir
# store holding the same three chunks.
ok 'put sys and B to the dir store too' sh -c "kvchunk put --store '$D' $M \
    --chunk-context none --tokens sys.tok --kv sys.npy --base-pos 0 &&
    kvchunk put --store '$D' $M --tokens b.tok --context sys.tok --kv b.npy \
    --base-pos $ls_"
ok 'assemble the KV from redis' kvchunk assemble --store "$R" $M -o ar.npy p.txt
ok 'assemble the KV from dir' kvchunk assemble --store "$D" $M -o ad.npy p.txt
expect_file_eq 'assemble: redis and dir give the same bytes' ar.npy ad.npy

# a flipped bit in the stored value
redis_cli setrange "kvc:1:$ka" 6000 X >/dev/null
expect_fail 3 'flipped bit: a miss' kvchunk get --store "$R" $M \
    --tokens a.tok --context sys.tok --at 500
expect_eq 'flipped bit: reported' "$(grep -c 'corrupt' "$T/.err")" 1
expect_out 'flipped bit: a miss in the streamed assemble too' 'sys hit
chunk hit
chunk miss
question miss' sh -c "kvchunk assemble --store '$R' $M -f text p.txt |
    cut -d' ' -f1,5"
expect_eq 'assemble: the damaged blob named' \
    "$(grep -c "miss: segment 2: corrupt (redis key kvc:1:$ka: " "$T/.err")" 1
expect_fail 1 'fsck finds it' sh -c "kvchunk fsck --store '$R' >f.out"
expect_eq 'fsck names it' "$(grep -c "^corrupt $ka" f.out)" 1
ok 'fsck --repair removes it' kvchunk fsck --store "$R" --repair
ok 'fsck: clean' kvchunk fsck --store "$R"
ok 'put it back' kvchunk put --store "$R" $M --tokens a.tok \
    --context sys.tok --kv a.npy --base-pos $ls_
# damaged again: a put replaces the value instead of calling it present
redis_cli setrange "kvc:1:$ka" 6000 X >/dev/null
expect_out 'put over a damaged value stores it' "$ka stored" kvchunk put \
    --store "$R" $M --tokens a.tok --context sys.tok --kv a.npy \
    --base-pos $ls_
ok 'then get hits' kvchunk get --store "$R" $M --tokens a.tok \
    --context sys.tok --at 500 -o r3.npy
expect_file_eq 'with the right bytes' r3.npy d.npy
expect_out 'a sound value: present' "$ka present" kvchunk put --store "$R" \
    $M --tokens a.tok --context sys.tok --kv a.npy --base-pos $ls_

# a server with a password: redis://:PASSWORD@HOST:PORT, percent-encoded
redis_cli config set requirepass 'p@ss:w/rd' >/dev/null
RA="redis://:p%40ss%3Aw%2Frd@${R#redis://}"
expect_fail 1 'password needed: get fails' kvchunk get --store "$R" $M \
    --tokens a.tok --context sys.tok --at 500
expect_eq 'password needed: the server says so' \
    "$(grep -c 'NOAUTH' "$T/.err")" 1
ok 'with the password: get' kvchunk get --store "$RA" $M --tokens a.tok \
    --context sys.tok --at 500 -o r4.npy
expect_file_eq 'with the password: same bytes' r4.npy d.npy
expect_fail 1 'a wrong password: refused' kvchunk stat \
    --store "redis://:nope@${R#redis://}"
expect_eq 'the message does not show the password' \
    "$(grep -c 'nope' "$T/.err")" 0
expect_fail 2 'credentials without a colon: usage' kvchunk stat \
    --store "redis://secret@${R#redis://}"
redis_cli -a 'p@ss:w/rd' --no-auth-warning config set requirepass '' \
    >/dev/null

# an IPv6 address in brackets (the server also listens on ::1 where the
# machine has it)
if [ "$(redis-cli -h ::1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; then
    ok 'redis://[::1]:PORT: get' kvchunk get --store "redis://[::1]:$REDIS_PORT" \
        $M --tokens a.tok --context sys.tok --at 500 -o r6.npy
    expect_file_eq 'redis://[::1]:PORT: the same bytes' r6.npy d.npy
    ok 'redis://[::1]:PORT/0: stat' kvchunk stat --store "redis://[::1]:$REDIS_PORT/0"
else
    echo "# ::1 not reachable here: IPv6 test skipped"
fi
expect_fail 2 'an unbracketed IPv6 address is refused' kvchunk stat \
    --store "redis://::1:$REDIS_PORT"
expect_eq '  ... saying how to write it' "$(grep -c 'in brackets' "$T/.err")" 1

# --max-mem bounds a reply read into memory: the blob of A (21 KiB of f32
# KV and a 4 KiB header) is refused under 1K, by get (the streamed reader)
# and by fsck (whole values), naming the size; within the limit it reads
# as before
expect_fail 1 'get: a blob larger than --max-mem is refused' kvchunk get \
    --store "$R" $M --tokens a.tok --context sys.tok --at 500 --max-mem 1K
expect_eq '  ... with its size' "$(grep -c 'a blob of [0-9]* bytes, more than --max-mem 1024' "$T/.err")" 1
expect_fail 1 'fsck: a value larger than --max-mem is refused' kvchunk fsck \
    --store "$R" --max-mem 1K
expect_eq '  ... saying so' "$(grep -c 'more than --max-mem 1024' "$T/.err")" 1
ok '  ... and within the limit: get' kvchunk get --store "$R" $M --tokens a.tok \
    --context sys.tok --at 500 --max-mem 1M -o rmax.npy
expect_file_eq '  ... the same bytes' rmax.npy d.npy
# get -f text moves the KV into a copy: 21 KiB beside the 25 KiB blob
expect_fail 1 'get -f text: the copy beside the blob counts too' kvchunk get \
    --store "$R" $M --tokens a.tok --context sys.tok --at 500 -f text \
    --max-mem 40K
expect_eq '  ... saying so' "$(grep -c 'beside the [0-9]* of the blob read, more than --max-mem 40960' "$T/.err")" 1
ok '  ... and within the limit' kvchunk get --store "$R" $M --tokens a.tok \
    --context sys.tok --at 500 -f text --max-mem 64K
# assemble: each reply is read beside the assembled KV (67 KiB for p.txt)
expect_fail 1 'assemble: a reply beside the KV counts against --max-mem' \
    kvchunk assemble --store "$R" $M -o asm.npy --max-mem 80K p.txt
expect_eq '  ... saying so' "$(grep -c 'a blob of [0-9]* bytes, more than --max-mem' "$T/.err")" 1
ok '  ... and within the limit' kvchunk assemble --store "$R" $M -o asm.npy \
    --max-mem 200K p.txt
# put: the KV read (31 KiB for B), and the blob twice (the SET's value and
# the command that carries it)
expect_fail 1 'put: the blob copies count against --max-mem' kvchunk put \
    --store "$R" $M --tokens b.tok --context sys.tok --kv b.npy \
    --base-pos $ls_ --max-mem 64K
expect_eq '  ... saying so' "$(grep -c 'a put to Redis needs [0-9]* bytes.*more than --max-mem 65536' "$T/.err")" 1
ok '  ... and within the limit' kvchunk put --store "$R" $M --tokens b.tok \
    --context sys.tok --kv b.npy --base-pos $ls_ --max-mem 1M

# a hung server: SIGSTOP
now_ms() { date +%s%3N; }
redis_pause
t0=$(now_ms)
expect_fail 1 'hung server: get fails' kvchunk get --store "$R" $M \
    --timeout 0.5 --tokens a.tok --context sys.tok --at 1
t1=$(now_ms)
expect_eq 'hung server: the reason' "$(grep -c 'no answer within' "$T/.err")" 1
[ $((t1 - t0)) -lt 3000 ]
expect_eq "hung server: error within the timeout ($((t1 - t0)) ms)" $? 0
expect_fail 1 'hung server: put fails' kvchunk put --store "$R" $M \
    --timeout 0.5 --tokens b.tok --context sys.tok --kv b.npy \
    --base-pos $ls_
redis_resume
ok 'resumed: nothing lost' kvchunk get --store "$R" $M --tokens a.tok \
    --context sys.tok --at 500 -o r2.npy
expect_file_eq 'resumed: same bytes' r2.npy d.npy

# a dead server
redis_stop
t0=$(now_ms)
expect_fail 1 'server down: get fails' kvchunk get --store "$R" $M \
    --tokens a.tok --context sys.tok --at 1
t1=$(now_ms)
expect_eq 'server down: the reason' "$(grep -c 'cannot connect' "$T/.err")" 1
[ $((t1 - t0)) -lt 3000 ]
expect_eq "server down: error at once ($((t1 - t0)) ms)" $? 0
expect_fail 1 'server down: assemble fails' kvchunk assemble --store "$R" \
    $M -f text p.txt
expect_fail 2 'bad redis url' kvchunk stat --store redis://127.0.0.1:99999
done_testing
