#!/bin/sh
# kvxattn_man.sh - every long option that `kvxattn SUB --help` prints is
# documented in man/kvxattn.1 (--help and --version excepted), and every
# option the page documents is one the program knows.
. "$KV_TOP/tests/lib.sh"
for s in estimate recall; do
    kvxattn $s --help 2>&1 | grep -o -E -- '--[a-z][a-z0-9-]+'
done | sort -u | grep -v -x -e --help -e --version >"$T/help.txt"
grep -o -E 'Fl \\?-[a-z][a-z0-9-]+' "$KV_TOP/man/kvxattn.1" |
    sed 's/^Fl \\\{0,1\}-/--/' | sort -u >"$T/man.txt"
expect_eq 'every --help option is in the man page' \
    "$(comm -23 "$T/help.txt" "$T/man.txt" | tr '\n' ' ')" ''
expect_eq 'every option of the man page is in a --help' \
    "$(comm -13 "$T/help.txt" "$T/man.txt" | tr '\n' ' ')" ''
done_testing
