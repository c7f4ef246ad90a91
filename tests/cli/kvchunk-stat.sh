#!/bin/sh
# kvchunk-stat.sh - kvchunk stat's entries and bytes on a dir: store equal
# an independent count (the blob files, and the index's rows read by the
# sqlite3 program when there is one) after puts, puts of stored chunks,
# rm, evict, puts and rms from several processes at once, and the upgrade
# of an index of the first schema, which keeps no totals; fsck reports
# totals that differ from the rows and --repair counts them again.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
S="dir:$T/st"
IDX="$T/st/v1/index.db"
M='--shape 1,1,8 --chunk-context none'
SQL=
command -v sqlite3 >/dev/null 2>&1 && SQL=sqlite3

# chunk i: i tokens from 100 * i, so that sizes differ
i=4
while [ $i -le 15 ]; do
    seq $((100 * i)) $((100 * i + i - 1)) >c$i.tok
    kvchunk toy --shape 1,1,8 --tokens c$i.tok --pos 0 -o c$i.npy || exit 1
    i=$((i + 1))
done
put() {  # i..
    for _c in "$@"; do
        kvchunk put --store "$S" $M --tokens c$_c.tok --kv c$_c.npy \
            --base-pos 0 >/dev/null || return 1
    done
}
key() { kvchunk key $M --tokens c$1.tok; }

# stat's entries and bytes against the files and the rows
same() {  # title
    if kvchunk stat --store "$S" >stat.out 2>stat.err; then
        got=$(awk -F': ' '$1 == "entries" { e = $2 }
                          $1 == "bytes" { b = $2 }
                          END { print e, b }' stat.out)
    else
        got="stat failed: $(cat stat.err)"
    fi
    nf=$(find "$T/st/v1/objects" -type f -name '*.kvc' | wc -l | tr -d ' ')
    bf=$(find "$T/st/v1/objects" -type f -name '*.kvc' -exec cat {} + |
         wc -c | tr -d ' ')
    expect_eq "$1: stat equals the blob files ($nf, $bf)" "$got" "$nf $bf"
    if [ -n "$SQL" ]; then
        rows=$(sqlite3 "$IDX" 'SELECT count(*), coalesce(sum(bytes), 0)
                               FROM entries' | tr '|' ' ')
        expect_eq '  ... and the index rows' "$got" "$rows"
    fi
}

ok 'put 8 chunks' put 4 5 6 7 8 9 10 11
same 'after 8 puts'
ok 'put 12, 8 of them stored already' put 4 5 6 7 8 9 10 11 12 13 14 15
same 'after puts of stored chunks'
ok 'rm 3' kvchunk rm --store "$S" "$(key 5)" "$(key 9)" "$(key 13)"
same 'after rm'
ok 'evict' kvchunk evict --store "$S" --max-size 20000 --low-watermark 0.8
same 'after evict'

# four processes put and rm overlapping chunks at once
worker() {
    n=0
    while [ $n -lt 10 ]; do
        c=$(( (n * 5 + $1 * 3) % 12 + 4 ))
        if [ $(( (n + $1) % 3 )) = 0 ]; then
            kvchunk rm --store "$S" "$(key $c)" >/dev/null 2>&1
            [ $? -le 1 ] || exit 1      # 1: not there
        else
            put $c || exit 1
        fi
        n=$((n + 1))
    done
}
worker 1 & p1=$!; worker 2 & p2=$!; worker 3 & p3=$!; worker 4 & p4=$!
f=0
for p in $p1 $p2 $p3 $p4; do wait $p || f=$((f + 1)); done
expect_eq '4 processes put and rm at once' "$f" 0
same 'after the writers'
ok 'fsck: clean' kvchunk fsck --store "$S"
expect_eq '  ... wrong_totals: 0' "$(grep -c '^wrong_totals: 0$' "$T/.out")" 1

if [ -z "$SQL" ]; then
    echo '# no sqlite3 program: the index not changed behind kvchunk'
    done_testing
    exit
fi

# stat reads the totals, fsck compares them with the rows
sqlite3 "$IDX" 'UPDATE totals SET bytes = bytes + 5'
want=$(sqlite3 "$IDX" 'SELECT bytes FROM totals')
ok 'stat' sh -c "kvchunk stat --store '$S' >stat.out"
expect_eq '  ... reads the kept totals (changed behind its back)' \
    "$(sed -n 's/^bytes: //p' stat.out)" "$want"
expect_fail 1 'fsck: totals that differ from the rows' sh -c \
    "kvchunk fsck --store '$S' >fsck.out"
expect_eq '  ... reported' "$(grep -c '^index totals say .* bytes; the rows hold' \
    fsck.out) $(sed -n 's/^wrong_totals: //p' fsck.out)" '1 1'
ok 'fsck --repair' kvchunk fsck --store "$S" --repair
expect_eq '  ... counts them again' "$(grep -c ': recounted$' "$T/.out")" 1
ok 'then fsck is clean' kvchunk fsck --store "$S"
same 'after the repair'

# an index of the first schema: no totals, user_version 0
old() {
    sqlite3 "$IDX" 'BEGIN; DROP TRIGGER totals_add; DROP TRIGGER totals_del;
        DROP TRIGGER totals_size; DROP TABLE totals; PRAGMA user_version = 0;
        COMMIT;'
}
old
same 'schema 0: stat counts the rows'
expect_eq '  ... and leaves the index as it is' \
    "$(sqlite3 "$IDX" 'PRAGMA user_version')" 0
ok 'schema 0: a put upgrades it' put 15
expect_eq '  ... to version 1' "$(sqlite3 "$IDX" 'PRAGMA user_version')" 1
same 'after the upgrade'
old
worker 5 & p1=$!; worker 6 & p2=$!; worker 7 & p3=$!
f=0
for p in $p1 $p2 $p3; do wait $p || f=$((f + 1)); done
expect_eq 'schema 0: 3 processes open it at once and write' "$f" 0
v=$(sqlite3 "$IDX" 'PRAGMA user_version')
n=$(sqlite3 "$IDX" "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
expect_eq '  ... upgraded once: version 1, three triggers' "$v $n" '1 3'
same 'after the upgrade by several'
ok 'fsck: clean' kvchunk fsck --store "$S"
done_testing
