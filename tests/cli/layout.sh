#!/bin/sh
# layout.sh - no function in tools/ or lib/ runs over 150 lines, but those
# listed here with the reason (spans from a line opening a definition at
# column 0 to the next closing brace at column 0).  A new long function
# fails; a listed one that got shorter must leave the list.
# Files are held to about 1,000 lines (further down).
. "$KV_TOP/tests/lib.sh"
# file:function   reason
allowed='
lib/attn/attn_tile.c:attn_run_item   the tile loop of the attention kernels
'
(cd "$KV_TOP" && for f in tools/*.c tools/*/*.c lib/*/*.c; do
    [ -f "$f" ] || continue
    awk -v F="$f" '/^[a-z].*\(/ && !/;$/ { name = $0; start = NR }
        /^}/ && start { if (NR - start + 1 > 150) { sub(/\(.*/, "", name)
            n = split(name, w, /[ *]+/); print F ":" w[n] } start = 0 }' "$f"
done) | sort >"$T/long"
printf '%s\n' "$allowed" | awk 'NF { print $1 }' | sort >"$T/listed"
expect_eq 'no function over 150 lines but the listed ones' \
    "$(comm -23 "$T/long" "$T/listed" | tr '\n' ' ')" ''
expect_eq 'every listed function is still over 150 lines (else unlist it)' \
    "$(comm -13 "$T/long" "$T/listed" | tr '\n' ' ')" ''
expect_eq 'the list is short' "$(wc -l <"$T/listed" | tr -d ' ')" 1

# No file in tools/ or lib/ runs over 1,000 lines unless its opening
# comment (its first 40 lines) says why, in a sentence holding the words
# "over 1,000 lines because".
(cd "$KV_TOP" && for f in tools/*.c tools/*/*.[ch] lib/*/*.[ch]; do
    [ -f "$f" ] || continue
    [ "$(wc -l <"$f")" -gt 1000 ] || continue
    head -n 40 "$f" | grep -qi 'over 1,000 lines because' || echo "$f"
done) | sort >"$T/big"
expect_eq 'no file over 1,000 lines without a why at its top' \
    "$(tr '\n' ' ' <"$T/big")" ''
done_testing
