#!/bin/sh
# kvchunk-man.sh - every long option that a `kvchunk SUB --help` prints is
# documented in man/kvchunk.1 (--help and --version excepted), every option
# the page documents is one some subcommand knows, and every subcommand of
# `kvchunk --help` has its own entry in the page.
. "$KV_TOP/tests/lib.sh"
subs=$(kvchunk --help 2>&1 | sed -n 's/^  \([a-z][a-z-]*\)[ ,].*/\1/p')
expect_eq 'kvchunk --help lists the subcommands' "$(echo $subs)" \
    'split key info put get assemble ls stat evict fsck rm pin toy slice selftest-rope sim'
for s in $subs unpin 'sim gen' 'sim from-split'; do
    kvchunk $s --help 2>&1 | grep -o -E -- '--[a-z][a-z0-9-]+'
done | sort -u | grep -v -x -e --help -e --version >"$T/help.txt"
# (lines naming another program, such as kvmask's --segments, are not ours)
grep -v 'Nm kv[a-z]' "$KV_TOP/man/kvchunk.1" | grep -o -E 'Fl \\?-[a-z][a-z0-9-]+' |
    sed 's/^Fl \\\{0,1\}-/--/' | sort -u >"$T/man.txt"
expect_eq 'every --help option is in the man page' \
    "$(comm -23 "$T/help.txt" "$T/man.txt" | tr '\n' ' ')" ''
expect_eq 'every option of the man page is in a --help' \
    "$(comm -13 "$T/help.txt" "$T/man.txt" | tr '\n' ' ')" ''
for s in $subs unpin; do
    expect_eq "man page: an entry for $s" \
        "$(grep -c -E "^\.It Cm (.* Cm )?$s( |\$)" "$KV_TOP/man/kvchunk.1" | awk '{ print ($1 > 0) }')" 1
done
done_testing
