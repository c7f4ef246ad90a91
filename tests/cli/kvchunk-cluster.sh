#!/bin/sh
# kvchunk-cluster.sh - the chunk store on a real Redis Cluster (three
# masters, three replicas, started here): put, get and assemble across
# masters; ls, stat and fsck over every master; a resharding during a read
# loop; a master killed and its replica promoted; a hung node and the
# timeout; AUTH; bad URLs.  Nothing wrong is ever served: every read is a
# hit with the right bytes or a miss.
. "$KV_TOP/tests/lib.sh"
. "$KV_TOP/tests/redis-cluster.sh"
cd "$T" || exit 1
if ! cluster_start; then
    echo "# redis-server without cluster support: skipped"
    done_testing
    exit
fi
C="--store $CLUSTER_URL --timeout 1"
M='--shape 2,2,16 --dtype f32'
tok() { printf '%s' "$2" | od -An -tu1 -v >"$1"; }

# Eight chunks: their keys fall in slots of different masters.
tok sys.tok 'System.'
i=1
while [ $i -le 8 ]; do
    tok c$i.tok "Chunk number $i of the corpus."
    kvchunk toy $M --tokens c$i.tok --pos 7 -o c$i.npy
    i=$((i + 1))
done
ok 'put eight chunks' sh -c "for i in 1 2 3 4 5 6 7 8; do
    kvchunk put $C $M --tokens c\$i.tok --context sys.tok --kv c\$i.npy \
        --base-pos 7 >/dev/null || exit 1; done"
masters_used=$(for i in 1 2 3 4 5 6 7 8; do
    k=$(kvchunk key $M --tokens c$i.tok --context sys.tok)
    cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k")"
done | sort -u | wc -l | tr -d ' ')
expect_eq 'the chunks live on all three masters' "$masters_used" 3
ok 'get each back at its base position: the same bytes' sh -c "for i in 1 2 3 4 5 6 7 8; do
    kvchunk get $C $M --tokens c\$i.tok --context sys.tok --at 7 -o g\$i.npy &&
    cmp -s g\$i.npy c\$i.npy || exit 1; done"
ok 'get moved to 100' kvchunk get $C $M --tokens c3.tok --context sys.tok --at 100 -o m.npy
kvchunk toy $M --tokens c3.tok --pos 100 -o d.npy
ok 'moved == computed at 100' kvattn cmp --quiet --atol 1e-6 --rtol 1e-6 m.npy d.npy
expect_out 'put again: present' "$(kvchunk key $M --tokens c1.tok --context sys.tok) present" \
    kvchunk put $C $M --tokens c1.tok --context sys.tok --kv c1.npy --base-pos 7
# A prompt of the system prompt and five chunks, assembled in one call: its
# reads are pipelined per master.
printf 'System.##Chunk number 1 of the corpus.##Chunk number 2 of the corpus.##Chunk number 5 of the corpus.##Chunk number 6 of the corpus.##Chunk number 8 of the corpus.##Q' >p.txt
ok 'assemble across masters' kvchunk assemble $C $M -f text p.txt
expect_eq 'five chunk hits, the system prompt a miss' \
    "$(awk '{ print $1, $5 }' "$T/.out" | tr '\n' ' ')" \
    'sys miss chunk hit chunk hit chunk hit chunk hit chunk hit question miss '
# The same prompt's KV (every hit moved to its position as the masters'
# replies arrive) against a dir store holding the same chunks.
ok 'the same chunks in a dir store' sh -c "for i in 1 2 3 4 5 6 7 8; do
    kvchunk put --store dir:dst $M --tokens c\$i.tok --context sys.tok \
        --kv c\$i.npy --base-pos 7 >/dev/null || exit 1; done"
ok 'assemble the KV across masters' kvchunk assemble $C $M -o ac.npy p.txt
ok 'assemble the KV from the dir store' kvchunk assemble --store dir:dst $M \
    -o ad.npy p.txt
expect_file_eq 'cluster and dir: the same bytes' ac.npy ad.npy
ok 'assemble --kv-only -j 1 across masters' kvchunk assemble $C $M --kv-only \
    -j 1 -o ac1.npy p.txt
ok 'assemble --kv-only from the dir store' kvchunk assemble --store dir:dst \
    $M --kv-only -o ad1.npy p.txt
expect_file_eq 'cluster and dir, --kv-only: the same bytes' ac1.npy ad1.npy
ok 'ls over every master' kvchunk ls $C
expect_eq 'ls: eight entries' "$(wc -l <"$T/.out" | tr -d ' ')" 8
ok 'stat' kvchunk stat $C
expect_eq 'stat: eight entries' "$(sed -n 's/^entries:* *//p' "$T/.out" | head -n 1)" 8
expect_eq 'stat: the puts counted once each' "$(sed -n 's/^puts:* *//p' "$T/.out")" 8
ok 'fsck: every master clean' kvchunk fsck $C
# A damaged blob on its master: a miss with a reason, fsck finds it.
k2=$(kvchunk key $M --tokens c2.tok --context sys.tok)
p2=$(cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k2")")
cluster_cli "$p2" setrange "kvc:1:$k2" 300 XXXX >/dev/null
expect_fail 3 'a damaged blob is a miss' kvchunk get $C $M --tokens c2.tok \
    --context sys.tok --at 7
kvchunk fsck $C >fsck.txt 2>&1
expect_eq 'fsck finds it (exit 1)' "$?:$(sed -n 's/^corrupt: //p' fsck.txt)" 1:1
ok 'fsck --repair' kvchunk fsck --repair $C
expect_eq 'repaired: the damaged blob is gone' "$(cluster_cli "$p2" exists "kvc:1:$k2")" 0
k6=$(kvchunk key $M --tokens c6.tok --context sys.tok)
p6=$(cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k6")")
ok 'rm routes to the master' kvchunk rm $C "$k6"
expect_eq 'rm: gone' "$(cluster_cli "$p6" exists "kvc:1:$k6")" 0

# ---- a slot migrating during reads -------------------------------------------
k1=$(kvchunk key $M --tokens c1.tok --context sys.tok)
s1=$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k1")
from=$(cluster_master_of "$s1")
from_id=$(cluster_cli "$from" cluster myid)
to=
for p in $CLUSTER_PORTS; do
    r=$(cluster_cli "$p" role | head -n 1)
    if [ "$r" = master ] && [ "$p" != "$from" ]; then to=$p; break; fi
done
to_id=$(cluster_cli "$to" cluster myid)
( i=0; while [ $i -lt 30 ]; do
    kvchunk get $C $M --tokens c1.tok --context sys.tok --at 7 -o r.npy 2>>reads.err
    st=$?
    if [ $st = 0 ]; then cmp -s r.npy c1.npy && echo hit || echo WRONG
    else echo "status $st"; fi
    i=$((i + 1))
  done >reads.txt ) &
reader=$!
# The chunk's slot moves the way redis-cli --cluster reshard moves one,
# with a read after each phase: the target imports and the source migrates
# (the key still at the source), the key goes over (the source answers
# ASK), every master learns the new owner (MOVED).
read_c1() {
    kvchunk get $C $M --tokens c1.tok --context sys.tok --at 7 -o "$1" &&
    cmp -s "$1" c1.npy
}
# the same for an assemble, whose replies are parsed as they stream in:
# chunk 1 with two others, as the dir store assembles them
printf 'System.##Chunk number 1 of the corpus.##Chunk number 3 of the corpus.##Chunk number 7 of the corpus.##Q' >p1.txt
kvchunk assemble --store dir:dst $M -o ad2.npy p1.txt
asm_c1() {
    kvchunk assemble $C $M -o "$1" p1.txt && cmp -s "$1" ad2.npy
}
migrate_key() {
    for k in $(cluster_cli "$from" cluster getkeysinslot "$s1" 100); do
        if [ -n "$CLUSTER_PASS" ]; then
            cluster_cli "$from" migrate 127.0.0.1 "$to" "" 0 5000 auth "$CLUSTER_PASS" keys "$k"
        else
            cluster_cli "$from" migrate 127.0.0.1 "$to" "$k" 0 5000
        fi
    done
}
ok 'slot importing on the target' cluster_cli "$to" cluster setslot "$s1" importing "$from_id"
ok 'slot migrating on the source' cluster_cli "$from" cluster setslot "$s1" migrating "$to_id"
ok 'read while migrating, the key at the source' read_c1 r1.npy
ok '  ... and an assemble' asm_c1 a1.npy
ok 'the key goes over' migrate_key
expect_eq 'the source answers ASK for it' \
    "$(cluster_cli "$from" exists "kvc:1:$k1" | cut -d' ' -f1)" ASK
ok 'read after the key moved: ASK followed' read_c1 r2.npy
ok '  ... and an assemble' asm_c1 a2.npy
ok 'every master learns the new owner' sh -c "for p in $CLUSTER_PORTS; do
    REDISCLI_AUTH='$CLUSTER_PASS' redis-cli -h 127.0.0.1 -p \$p cluster setslot $s1 node $to_id >/dev/null 2>&1; done; true"
ok 'read after the move: MOVED followed' read_c1 r3.npy
ok '  ... and an assemble' asm_c1 a3.npy
wait $reader
expect_eq 'no read served wrong bytes' "$(grep -c WRONG reads.txt)" 0
expect_eq 'every read was a hit (MOVED and ASK followed)' \
    "$(grep -c '^hit$' reads.txt)" 30
expect_eq 'the slot has moved' "$(cluster_master_of "$s1")" "$to"
ok 'get after the resharding' kvchunk get $C $M --tokens c1.tok --context sys.tok \
    --at 7 -o after.npy
expect_file_eq 'the same bytes' after.npy c1.npy

# ---- a hung node: the timeout holds -----------------------------------------
# no failover while it hangs: a slow run (a sanitizer, an emulator) would
# otherwise see its replica promoted and the reads served
for _p in $CLUSTER_PORTS; do
    cluster_cli "$_p" config set cluster-replica-no-failover yes >/dev/null
done
k4=$(kvchunk key $M --tokens c4.tok --context sys.tok)
p4=$(cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k4")")
pid4=$(cluster_cli "$p4" info server | tr -d '\r' | sed -n 's/^process_id://p')
kill -STOP "$pid4"
t0=$(date +%s)
expect_fail 1 'get from a hung master fails' kvchunk get $C $M --tokens c4.tok \
    --context sys.tok --at 7
t1=$(date +%s)
expect_eq 'it says no answer within the timeout' \
    "$(grep -c 'no answer within 1 s' "$T/.err")" 1
ok 'within a few seconds, not a hang' test $((t1 - t0)) -le 5
printf 'System.##Chunk number 4 of the corpus.##Q' >p4.txt
t0=$(date +%s)
expect_fail 1 'assemble from a hung master fails' kvchunk assemble $C $M \
    -o a4.npy p4.txt
t1=$(date +%s)
# the other masters may call the cluster down by then (node timeout 1 s)
expect_eq 'it says no answer within the timeout, or the cluster is down' \
    "$(grep -c -E 'no answer within 1 s|the cluster is down \(redis 127.0.0.1:[0-9]+: CLUSTERDOWN' "$T/.err")" 1
ok 'within a few seconds, not a hang' test $((t1 - t0)) -le 5
ok 'nothing written' test ! -e a4.npy
kill -CONT "$pid4"
cluster_wait_ok 20
for _p in $CLUSTER_PORTS; do
    cluster_cli "$_p" config set cluster-replica-no-failover no >/dev/null
done

# ---- a master killed: its replica takes over ----------------------------------
k5=$(kvchunk key $M --tokens c5.tok --context sys.tok)
p5=$(cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k5")")
pid5=$(cluster_cli "$p5" info server | tr -d '\r' | sed -n 's/^process_id://p')
cluster_cli "$p5" wait 1 2000 >/dev/null     # the replica has the writes
kill -KILL "$pid5"
expect_fail 1 'while the master is down: an error' kvchunk get $C $M \
    --tokens c5.tok --context sys.tok --at 7
expect_eq 'that names the node or the cluster state' \
    "$(grep -c -E "127.0.0.1:$p5|CLUSTERDOWN|cluster is down" "$T/.err")" 1
failover=0
i=0
while [ $i -lt 50 ]; do
    np=$(cluster_master_of "$(cluster_cli "${CLUSTER_PORTS%% *}" cluster keyslot "kvc:1:$k5")")
    if [ -n "$np" ] && [ "$np" != "$p5" ]; then failover=1; break; fi
    sleep 0.2; i=$((i + 1))
done
expect_eq 'a replica was promoted' "$failover" 1
cluster_wait_ok 20
kvchunk get $C $M --tokens c5.tok --context sys.tok --at 7 -o f.npy 2>/dev/null
st=$?
ok 'after the failover: a hit or a miss, never an error' test "$st" = 0 -o "$st" = 3
if [ "$st" = 0 ]; then
    expect_file_eq 'a hit from the promoted replica has the right bytes' f.npy c5.npy
fi

# ---- AUTH -------------------------------------------------------------------
cluster_stop
if cluster_start 's3cret:pw'; then
    A="--store $(echo "$CLUSTER_URL" | sed 's/s3cret:pw/s3cret%3Apw/') --timeout 1"
    ok 'AUTH: put with the password' kvchunk put $A $M --tokens c7.tok \
        --context sys.tok --kv c7.npy --base-pos 7
    ok 'AUTH: get' kvchunk get $A $M --tokens c7.tok --context sys.tok --at 7 -o a.npy
    expect_file_eq 'AUTH: the same bytes' a.npy c7.npy
    bad=$(echo "$CLUSTER_URL" | sed 's/s3cret:pw/wrong/')
    expect_fail 1 'AUTH: a wrong password' kvchunk ls --store "$bad" --timeout 1
    expect_eq 'says so' "$(grep -c -i 'WRONGPASS\|invalid\|auth' "$T/.err")" 1
    nopass=$(echo "$CLUSTER_URL" | sed 's/:s3cret:pw@//')
    expect_fail 1 'AUTH: no password' kvchunk ls --store "$nopass" --timeout 1
    expect_eq 'says authentication is required' "$(grep -c 'NOAUTH' "$T/.err")" 1
    # a seed named by its IPv6 address, in brackets
    p0=
    for p in $CLUSTER_PORTS; do
        [ -z "$p0" ] && [ "$(REDISCLI_AUTH='s3cret:pw' redis-cli -h ::1 -p "$p" \
            ping 2>/dev/null)" = PONG ] && p0=$p
    done
    if [ -n "$p0" ]; then
        ok 'redis-cluster://[::1]:PORT: a seed over IPv6' kvchunk get \
            --store "redis-cluster://:s3cret%3Apw@[::1]:$p0" --timeout 1 $M \
            --tokens c7.tok --context sys.tok --at 7 -o a6.npy
        expect_file_eq '  ... the same bytes' a6.npy c7.npy
    else
        echo "# ::1 not reachable here: IPv6 seed test skipped"
    fi
else
    _report 1 'a cluster with requirepass starts'
fi

# ---- bad URLs -----------------------------------------------------------------
expect_fail 2 'a bare IPv6 seed is refused' kvchunk ls --store "redis-cluster://::1:7000"
expect_fail 2 'redis-cluster:// without a node' kvchunk ls --store redis-cluster://
expect_fail 2 'a node without a port' kvchunk ls --store redis-cluster://127.0.0.1
expect_fail 1 'nobody listening' kvchunk ls --store redis-cluster://127.0.0.1:1 --timeout 1
cluster_stop
done_testing
