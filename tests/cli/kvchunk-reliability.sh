#!/bin/sh
# kvchunk-reliability.sh - the dir: store under trouble: a flipped bit, put
# processes killed with SIGKILL at random moments, writers and readers in
# parallel, a read-only store, bad permissions, a full disk.  In every case:
# a clear error or a miss, never wrong data, nothing lost.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
chmod 755 "$T"
S="dir:$T/store"
M="--shape 4,4,64 --model rel"

# a 2048-token chunk: 4 MiB of bf16 KV, reused under many token lists
seq 1 2048 >big.tok
ok 'toy KV of 2048 tokens' kvchunk toy $M --tokens big.tok --pos 0 -o big.npy
seq 1 16 >small.tok
ok 'toy KV of 16 tokens' kvchunk toy $M --tokens small.tok --pos 0 \
    -o small.npy
put() {  # token file, KV
    kvchunk put --store "$S" $M --chunk-context none --tokens "$1" --kv "$2" \
        --base-pos 0
}
get() {  # token file, position
    kvchunk get --store "$S" $M --chunk-context none --tokens "$1" --at "$2"
}

# ---- a flipped bit ----------------------------------------------------------
ok 'put' put small.tok small.npy
key=$(kvchunk key $M --chunk-context none --tokens small.tok)
blob=$(find "$T/store" -name "$key.kvc")
printf '\001' | dd of="$blob" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_fail 3 'flipped bit: a miss, exit 3' get small.tok 7
expect_eq 'flipped bit: reported' \
    "$(grep -c 'corrupt.*checksum' "$T/.err")" 1
expect_out 'stat counts the checksum failure' 'checksum_failures: 1' \
    sh -c "kvchunk stat --store '$S' | grep checksum"
expect_fail 1 'fsck finds it (exit 1)' sh -c "kvchunk fsck --store '$S' \
    >fsck.out"
expect_eq 'fsck names it' "$(grep -c "^corrupt $key" fsck.out)" 1
ok 'fsck --repair' kvchunk fsck --store "$S" --repair
ok 'then fsck is clean' kvchunk fsck --store "$S"
expect_fail 3 'and the entry is gone: a miss' get small.tok 7
ok 'put it again' put small.tok small.npy
ok 'get it again' get small.tok 7

# ---- a lost or broken index is rebuilt from the blobs --------------------
n0=$(kvchunk ls --store "$S" | wc -l)
rm -f "$T/store/v1/index.db" "$T/store/v1/index.db-wal" \
    "$T/store/v1/index.db-shm"
expect_fail 1 'index gone: fsck finds unindexed blobs' sh -c \
    "kvchunk fsck --store '$S' >fsck0.out"
expect_eq 'index gone: fsck names them' "$(grep -c '^unindexed [0-9a-f]' fsck0.out)" \
    "$n0"
ok 'index gone: get still hits' get small.tok 9
ok 'fsck --repair re-adds them' kvchunk fsck --store "$S" --repair
expect_eq 'ls lists them again' "$(kvchunk ls --store "$S" | wc -l)" "$n0"
printf 'this is not a database' >"$T/store/v1/index.db"
rm -f "$T/store/v1/index.db-wal" "$T/store/v1/index.db-shm"
ok 'index broken: get still hits' get small.tok 9
expect_fail 1 'index broken: stat says why' kvchunk stat --store "$S"
expect_fail 1 'index broken: fsck finds it' sh -c \
    "kvchunk fsck --store '$S' >fsck1.out"
expect_eq 'index broken: reported as an unreadable index' \
    "$(grep -c '^index unreadable: .*not a database' fsck1.out) $(sed -n 's/^index_unreadable: //p' fsck1.out)" '1 1'
expect_eq 'index broken: not as rows without blobs' \
    "$(sed -n 's/^orphan_rows: //p' fsck1.out)" 0
ok 'index broken: fsck --repair rebuilds it' kvchunk fsck --store "$S" \
    --repair
ok 'then clean' kvchunk fsck --store "$S"
expect_eq 'and complete' "$(kvchunk ls --store "$S" | wc -l)" "$n0"
rm -f "$T/store/v1/index.db" "$T/store/v1/index.db-wal" "$T/store/v1/index.db-shm"
mkdir "$T/store/v1/index.db" && touch "$T/store/v1/index.db/x"
expect_fail 1 'index a directory: fsck finds it unreadable' sh -c \
    "kvchunk fsck --store '$S' >fsck2.out"
expect_eq '  ... as such' "$(grep -c '^index_unreadable: 1' fsck2.out)" 1
expect_fail 1 'index a directory: --repair cannot replace it and says so' \
    kvchunk fsck --store "$S" --repair
expect_eq '  ... naming it' \
    "$(grep -c "cannot be replaced: cannot remove '.*index.db'" "$T/.err")" 1
rm -rf "$T/store/v1/index.db"
ok 'index gone again: --repair' kvchunk fsck --store "$S" --repair

# ---- SIGKILL at random moments ---------------------------------------------
i=0
while [ $i -lt 30 ]; do
    seq $((i * 3000 + 1)) $((i * 3000 + 2048)) >k$i.tok
    kvchunk put --store "$S" $M --chunk-context none --tokens k$i.tok \
        --kv big.npy --base-pos 0 >/dev/null 2>&1 &
    pid=$!
    r=$(od -An -N1 -tu1 /dev/urandom | tr -d ' ')
    sleep "0.0$((r % 80 / 10))$((r % 10))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    i=$((i + 1))
done
kvchunk fsck --store "$S" >fsck2.out 2>&1
expect_eq "after 30 killed puts: no corrupt blob ($(grep -c '^stale' \
    fsck2.out) interrupted)" "$(grep '^corrupt:' fsck2.out)" 'corrupt: 0'
bad=0; hits=0
i=0
while [ $i -lt 30 ]; do
    get k$i.tok 100 >/dev/null 2>&1
    st=$?
    [ $st = 0 ] && hits=$((hits + 1))
    [ $st = 0 ] || [ $st = 3 ] || bad=$((bad + 1))
    i=$((i + 1))
done
expect_eq "every get hits or misses ($hits hits)" "$bad" 0
ok 'fsck --repair after the crashes' kvchunk fsck --store "$S" --repair
ok 'then clean' kvchunk fsck --store "$S"

# ---- writers and readers in parallel ---------------------------------------
worker() {
    n=0; fails=0
    while [ $n -lt 12 ]; do
        j=$(( (n * 7 + $1) % 5 ))
        seq $((j * 100 + 1)) $((j * 100 + 16)) >w$1.tok
        if [ $(( (n + $1) % 2 )) = 0 ]; then
            put w$1.tok small.npy >/dev/null 2>&1 || fails=$((fails + 1))
        else
            get w$1.tok 50 >/dev/null 2>&1
            st=$?
            [ $st = 0 ] || [ $st = 3 ] || fails=$((fails + 1))
        fi
        n=$((n + 1))
    done
    exit $fails
}
worker 1 & p1=$!; worker 2 & p2=$!; worker 3 & p3=$!; worker 4 & p4=$!
f=0
for p in $p1 $p2 $p3 $p4; do wait $p || f=$((f + 1)); done
expect_eq '4 writers/readers in parallel: no errors' "$f" 0
ok 'index consistent with the blobs' kvchunk fsck --store "$S"

# ---- put and evict in parallel: the index stays consistent ------------------
# 40 writers put 1 MiB chunks (40 token lists, so some are put again just
# as they are evicted) while 10 evictors hold the store to 3 MiB; then
# fsck must find every blob indexed and every row with its blob.
seq 1 256 >e.tok
ok 'toy KV of 256 tokens' kvchunk toy $M --tokens e.tok --pos 0 -o e.npy
ES="dir:$T/evstore"
ok 'a store to race in' kvchunk put --store "$ES" $M --chunk-context none \
    --tokens e.tok --kv e.npy --base-pos 0
eput() {
    n=0; fails=0
    while [ $n -lt 2 ]; do
        j=$(( (n * 7 + $1) % 40 ))
        seq $((j * 1000 + 1)) $((j * 1000 + 256)) >e$1.tok
        kvchunk put --store "$ES" $M --chunk-context none --tokens e$1.tok \
            --kv e.npy --base-pos 0 >/dev/null 2>>race.err || fails=$((fails + 1))
        n=$((n + 1))
    done
    exit $fails
}
eevict() {
    n=0; fails=0
    while [ $n -lt 2 ]; do
        kvchunk evict --store "$ES" --max-size 3M >/dev/null 2>>race.err ||
            fails=$((fails + 1))
        n=$((n + 1))
    done
    exit $fails
}
pids=
i=0; while [ $i -lt 40 ]; do eput $i & pids="$pids $!"; i=$((i + 1)); done
i=0; while [ $i -lt 10 ]; do eevict $i & pids="$pids $!"; i=$((i + 1)); done
f=0
for p in $pids; do wait $p || f=$((f + 1)); done
expect_eq '40 puts and 10 evicts in parallel: no errors' "$f" 0
expect_eq '  ... nothing on stderr' "$(wc -c <race.err | tr -d ' ')" 0
ok '  ... fsck: every blob indexed, every row with its blob' \
    kvchunk fsck --store "$ES"

# ---- read-only store, bad permissions ----------------------------------------
# As root the store is read by another user (nobody).  It must reach all it
# runs whatever the checkout's path and the modes of its parents: the
# program (under emulation the binary and a wrapper of its own) is copied
# into $T/bin, mode 755, and started once first, so that a program that
# cannot start is reported as that, not as a store failure.  Without root,
# file modes make the store read-only.
AS=
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    AS="setpriv --reuid=nobody --regid=nogroup --clear-groups"
fi
chmod -R a+rX "$T"
mkdir -m 777 "$T/out"
RUN=kvchunk
if [ -n "$AS" ]; then
    mkdir -m 755 "$T/bin"
    if [ -n "${KV_RUNNER:-}" ]; then
        # the wrapper in $KV_BIN names the binary inside the checkout
        prog=${KV_UNIT:+$(dirname "$KV_UNIT")/bin/kvchunk}
        [ -n "$prog" ] && [ -f "$prog" ] ||
            prog=$(sed -n 's/^exec .* \([^ ]*\) "\$@"$/\1/p' "$KV_BIN/kvchunk")
        mkdir -m 755 "$T/bin/prog"
        cp "$prog" "$T/bin/prog/kvchunk"
        printf '#!/bin/sh\nexec %s %s "$@"\n' "$KV_RUNNER" "$T/bin/prog/kvchunk" \
            >"$T/bin/kvchunk"
    else
        cp "$KV_BIN/kvchunk" "$T/bin/kvchunk"
    fi
    chmod -R a+rX "$T/bin"
    chmod 755 "$T/bin/kvchunk"
    RUN="$AS $T/bin/kvchunk"
    if $RUN --version >"$T/start.out" 2>&1 &&
        grep -q '^kvchunk (kvtools)' "$T/start.out"; then
        _report 0 'kvchunk starts as nobody'
    else
        _report 1 'kvchunk starts as nobody' "the program under test does not \
start as user nobody (not a store failure): $(head -c 400 "$T/start.out")"
        RUN=
    fi
else
    chmod -R a-w "$T/store"
fi
seq 900 915 >ro.tok
if [ -n "$RUN" ]; then
    ok 'read-only store: get works' $RUN get --store "$S" $M \
        --chunk-context none --tokens small.tok --at 3 -o "$T/out/ro.npy"
    expect_fail 1 'read-only store: put fails' $RUN put --store "$S" $M \
        --chunk-context none --tokens ro.tok --kv small.npy --base-pos 0
    expect_eq 'read-only store: the reason' \
        "$(grep -c 'Permission denied\|Read-only' "$T/.err")" 1
fi
[ -z "$AS" ] && chmod -R u+w "$T/store"
ok 'nothing lost' get small.tok 3
chmod 000 "$T/store/v1/objects"
if [ -n "$AS" ] && [ -n "$RUN" ]; then
    expect_fail 1 'unreadable store: a clear error, exit 1' $RUN get \
        --store "$S" $M --chunk-context none --tokens small.tok --at 3
    expect_eq 'unreadable store: the reason' \
        "$(grep -c 'Permission denied' "$T/.err")" 1
fi
chmod 755 "$T/store/v1/objects"
ok 'nothing lost' get small.tok 3

# ---- a full disk ---------------------------------------------------------------
seq 5001 7048 >full.tok
expect_fail 1 'file size limit: put fails' sh -c "ulimit -f 200; exec \
    kvchunk put --store '$S' $M --chunk-context none --tokens full.tok \
    --kv big.npy --base-pos 0"
expect_eq 'file size limit: the reason' \
    "$(grep -c 'File too large' "$T/.err")" 1
expect_eq 'no temporary file left' "$(ls "$T/store/v1/staging" | wc -l)" 0
expect_fail 3 'and no entry' get full.tok 0
if [ -w /dev/full ]; then
    expect_fail 1 'output to a full device' sh -c "kvchunk get --store '$S' \
        $M --chunk-context none --tokens small.tok --at 3 >/dev/full"
fi
ok 'store still clean' kvchunk fsck --store "$S"
done_testing
