#!/bin/sh
# docs.sh - the documentation's examples are run as tests (as jq runs its
# manual): every ```sh block of README.md and every .Bd -literal block of the
# PIPELINES section of man/kvtools.7.
#
# README.md, transcript blocks (a block with '$ ' lines): the commands run in
# order, in one fresh directory per block, with the programs on PATH; a
# command is its '$ ' line plus the lines after it while a line ends in '\'.
# The lines up to the next '$ ' line are its expected standard output,
# compared word by word: words must be equal, except that numbers may differ
# by a relative 1e-4 (the last digits of a floating-point result depend on
# the BLAS kernel the CPU selects), one TAP point per command.
# Standard error must be empty (a terminal would show it, and the README
# shows none), and the exit status must be 0 unless the next command is
# 'echo $?' (which shows it).  '$?' at the start of a command is the status
# of the one before, as in an interactive shell.
#
# README.md, plain blocks (no '$ ' lines): each non-blank line (joined as
# above) is a command run in order in one fresh directory, one TAP point per
# command, which must exit 0 with empty standard error.  If a plain ```sh
# block is followed directly by a bare ``` block, that block is the standard
# output of the last command and is compared too.
#
# man/kvtools.7, PIPELINES: each .Bd -literal block, unescaped (\e \- \(aq
# \(dq \& \(mu), runs as one 'sh -e' script in a fresh directory and must
# exit 0; one TAP point per block.
#
# Rules invisible in the documents, below:
#   readme_skip, man_skip  'regexp|reason': a command (README) or a single
#       line (kvtools.7) matching the extended regexp is not run; a TAP skip
#       line with the reason is printed instead.
#   readme_setup  'regexp|commands': before a README block containing a
#       command that matches, the commands make its input files (only ever
#       the way the README itself shows elsewhere).
#   man_continue  'regexp': a kvtools.7 block whose first line matches runs in the
#       directory of the block before it (the page says it continues it).
#   man_expect  'regexp|line': the standard output of a matching kvtools.7
#       block must contain this line (a value the page's prose states).
. "$KV_TOP/tests/lib.sh"

readme_skip='
^sh scripts/setup|installs packages and builds the project itself
kvmask causal -n 1048576 -f block|writes a 1 GiB BlockMask
'
readme_setup='
tests/configs/|mkdir -p tests && cp -R "$KV_TOP/tests/configs" tests/
--segments segs.txt|printf '\''You are terse.##Rome is in Italy.##Paris is in France.##Where?'\'' >prompt.txt && kvchunk split -f text prompt.txt >segs.txt
'
man_skip='
pnmtopng|netpbm is not among the packages scripts/setup installs
saved-from-npu.npy|needs a file saved on an Ascend device
'
man_continue='
^kvxattn estimate -q q.npy -k k.npy --block-size 64
^kvmask causal -n 4096 -f block
'
man_expect='
kvslot plan --prompts shared.txt|slot_mapping: 4 5 6 7 8 9 10 11 12 13 16 17 18
kvslot plan --chunk-cache|copy_delta: 0 0 17
--fields slot_mapping -f text|slot_mapping: 5 14 13 16 17
'

# rule_match RULES TEXT: print the right side of the first rule whose left
# side matches a line of TEXT; status 1 when none does.
rule_match() {
    printf '%s\n' "$1" | while IFS= read -r _rule; do
        [ -n "$_rule" ] || continue
        _re=${_rule%%|*}
        if printf '%s\n' "$2" | grep -Eq -e "$_re"; then
            printf '%s\n' "${_rule#*|}"; exit 3
        fi
    done
    [ $? = 3 ]
}

skip_point() {   # title reason
    _n=$((_n + 1)); _pass=$((_pass + 1))
    echo "ok $_n - $1 # SKIP $2"
}

# same_words EXPECTED GOT: equal word by word, numbers within 1e-4 relative.
same_words() {
    awk -v exp_file="$1" '
    function isnum(w) { return w ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
    function close_enough(a, b,   d, m) {
        if (a == b) return 1
        if (!isnum(a) || !isnum(b)) return 0
        d = a - b; if (d < 0) d = -d
        m = a < 0 ? -a : a; if ((b < 0 ? -b : b) > m) m = (b < 0 ? -b : b)
        return d <= 1e-4 * m || d <= 1e-12
    }
    {
        if ((getline line < exp_file) <= 0) exit 1
        n = split($0, g, /[ \t]+/); m = split(line, x, /[ \t]+/)
        if (n != m) exit 1
        for (i = 1; i <= n; i++) if (!close_enough(x[i], g[i])) exit 1
    }
    END { if ((getline line < exp_file) > 0) exit 1 }' "$2"
}

# Check one command's captured run: dir, title, status-allowed (1/0).
check_run() {   # title outfile errfile expfile status may_fail
    if [ "$5" -gt 128 ]; then
        _report 1 "$1" "died with signal $(($5 - 128)): $(head -c 600 "$3")"
    elif [ "$5" != 0 ] && [ "$6" = 0 ]; then
        _report 1 "$1" "exit $5: $(head -c 600 "$3")$(tail -n 8 "$2")"
    elif [ -s "$3" ]; then
        _report 1 "$1" "stderr not empty: $(head -c 600 "$3")"
    elif [ -n "$4" ] && ! cmp -s "$4" "$2" && ! same_words "$4" "$2"; then
        _report 1 "$1" "$(diff "$4" "$2" | head -20)"
    else
        _report 0 "$1"
    fi
}

# --- README.md ----------------------------------------------------------
R="$T/readme"
mkdir -p "$R"
awk -v dir="$R" '
function newcmd(text) {
    k++; cmd = dir "/" b ".cmd." k; ef = dir "/" b ".exp." k
    printf "%s\n", text > cmd; close(cmd)
    printf "" > ef; close(ef)
    cont = (text ~ /\\$/)
}
state == 0 && /^```sh$/ { state = 1; b++; k = 0; kind = ""; cont = 0
                          just = 0; next }
state == 0 && /^```$/ && just { state = 2; just = 0
                               printf "" > (dir "/" b ".exp." k); next }
state == 0 && /^```/ { state = 3; just = 0; next }
state == 0 { just = 0; next }
state == 3 { if ($0 ~ /^```$/) state = 0; next }
state == 2 {
    if ($0 ~ /^```$/) { state = 0; close(dir "/" b ".exp." k); next }
    print >> (dir "/" b ".exp." k); next
}
state == 1 && /^```$/ {
    state = 0; just = (kind == "plain")
    if (kind == "") kind = "plain"
    print kind > (dir "/" b ".kind"); close(dir "/" b ".kind")
    print k > (dir "/" b ".n"); close(dir "/" b ".n")
    next
}
state == 1 && cont {
    print >> cmd; close(cmd); cont = ($0 ~ /\\$/); next
}
state == 1 && /^\$ / {
    if (kind == "plain") kind = "mixed"; else if (kind == "") kind = "transcript"
    newcmd(substr($0, 3)); next
}
state == 1 && kind == "transcript" { print >> ef; close(ef); next }
state == 1 && /^[ \t]*$/ { next }
state == 1 { if (kind == "") kind = "plain"; else if (kind != "plain") kind = "mixed"
             newcmd($0); next }
END { print b + 0 > (dir "/count") }
' "$KV_TOP/README.md"

n_blocks=$(cat "$R/count")
b=1
while [ "$b" -le "$n_blocks" ]; do
    kind=$(cat "$R/$b.kind")
    n_cmds=$(cat "$R/$b.n")
    dir="$T/readme-$b"
    mkdir -p "$dir"
    if [ "$kind" = mixed ]; then
        _report 1 "README block $b" "mixes '\$ ' lines with plain commands"
        b=$((b + 1)); continue
    fi
    all=$(cat "$R/$b".cmd.* 2>/dev/null)
    if setup=$(rule_match "$readme_setup" "$all"); then
        ok "README block $b: set up its inputs" sh -c "cd '$dir' && $setup"
    fi
    prev=0
    k=1
    while [ "$k" -le "$n_cmds" ]; do
        cmd=$(cat "$R/$b.cmd.$k")
        title="README block $b: $(printf '%s' "$cmd" | head -n 1)"
        if reason=$(rule_match "$readme_skip" "$cmd"); then
            skip_point "$title" "$reason"
            k=$((k + 1)); continue
        fi
        may_fail=0
        if [ "$k" -lt "$n_cmds" ] && grep -q '^echo \$?' "$R/$b.cmd.$((k + 1))"; then
            may_fail=1
        fi
        exp=
        if [ "$kind" = transcript ]; then
            exp="$R/$b.exp.$k"
        elif [ "$k" = "$n_cmds" ] && [ -s "$R/$b.exp.$k" ]; then
            exp="$R/$b.exp.$k"
        fi
        sh -c "cd '$dir' || exit 125
(exit $prev)
$cmd" >"$T/.out" 2>"$T/.err"
        prev=$?
        check_run "$title" "$T/.out" "$T/.err" "$exp" "$prev" "$may_fail"
        k=$((k + 1))
    done
    b=$((b + 1))
done

# --- man/kvtools.7 PIPELINES -------------------------------------------
M="$T/man"
mkdir -p "$M"
awk -v dir="$M" '
/^\.Sh / { inp = ($2 == "PIPELINES"); next }
!inp { next }
/^\.Bd -literal/ { m++; inb = 1; f = dir "/" m ".sh"; printf "" > f; next }
/^\.Ed/ && inb { inb = 0; close(f); next }
inb {
    line = $0
    gsub(/\\-/, "-", line); gsub(/\\\(aq/, "\047", line)
    gsub(/\\\(dq/, "\"", line); gsub(/\\\(mu/, "x", line)
    gsub(/\\&/, "", line); gsub(/\\e/, "\\", line)
    print line >> f
}
END { print m + 0 > (dir "/count") }
' "$KV_TOP/man/kvtools.7"

n_blocks=$(cat "$M/count")
m=1
dir=
while [ "$m" -le "$n_blocks" ]; do
    text=$(cat "$M/$m.sh")
    title="kvtools.7 block $m: $(head -n 1 "$M/$m.sh")"
    if [ -z "$dir" ] || ! rule_match "$man_continue" "$(head -n 1 "$M/$m.sh")" >/dev/null; then
        dir="$T/man-$m"
        mkdir -p "$dir"
    fi
    # Drop single lines that must not run, with a skip point each.
    : >"$M/$m.run"
    while IFS= read -r line; do
        if reason=$(rule_match "$man_skip" "$line"); then
            skip_point "kvtools.7 block $m: $line" "$reason"
        else
            printf '%s\n' "$line" >>"$M/$m.run"
        fi
    done <"$M/$m.sh"
    (cd "$dir" && sh -e "$M/$m.run") >"$T/.out" 2>"$T/.err"
    st=$?
    check_run "$title" "$T/.out" "$T/.err" "" "$st" 0
    if want=$(rule_match "$man_expect" "$text"); then
        if grep -qxF -e "$want" "$T/.out"; then
            _report 0 "kvtools.7 block $m prints '$want'"
        else
            _report 1 "kvtools.7 block $m prints '$want'" "$(head -20 "$T/.out")"
        fi
    fi
    m=$((m + 1))
done
done_testing
