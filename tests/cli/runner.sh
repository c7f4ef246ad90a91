#!/bin/sh
# runner.sh - tests/run.sh itself (make check's runner), on small test files
# made here: one closing line and it is the last, the files' own closing
# lines and stray stderr only in the log, every failure repeated at the end
# with the command that reruns its file, V=1 printing everything, and a
# title with a newline kept on its TAP line.
. "$KV_TOP/tests/lib.sh"
mkdir -p "$T/t"
cat >"$T/t/good.sh" <<'EOF'
. "$KV_TOP/tests/lib.sh"
ok 'two
lines' true
echo 'a stray message' >&2
ok 'plain' true
done_testing
EOF
cat >"$T/t/bad.sh" <<'EOF'
. "$KV_TOP/tests/lib.sh"
ok 'fine' true
expect_eq 'the wrong one' 1 2
done_testing
EOF
cat >"$T/t/crash.sh" <<'EOF'
echo 'ok 1 - started'
echo 'the last words' >&2
exit 3
EOF
# (without the caller's KVTOOLS_ISA and KV_RUNNER, which the runner would use)
runner() {   # verbose files...: run tests/run.sh, its output in $T/term
    _v=$1; shift
    (unset KVTOOLS_ISA KV_RUNNER; KV_LOG="$T/check.log" KV_VERBOSE=$_v KV_AGAIN='make check BUILD=x' \
        KV_UNIT= sh "$KV_TOP/tests/run.sh" "$@" >"$T/term" 2>&1)
}
closing() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1"; }

runner 0 "$T/t/good.sh"
expect_eq 'a passing run: exit 0' "$?" 0
expect_eq 'a passing run: one closing line, the sum' "$(closing "$T/term")" '2 passed, 0 failed'
expect_eq 'a passing run: it is the last line' "$(tail -n 1 "$T/term")" '2 passed, 0 failed'
expect_eq 'a passing run: one line for the file' "$(grep -c 'good.sh' "$T/term")" 1
expect_eq 'a passing run: no TAP and no stderr of the file on the terminal' \
    "$(grep -c -e '^ok' -e 'stray' "$T/term")" 0
expect_eq 'the log has the file'"'"'s stderr' "$(grep -c 'a stray message' "$T/check.log")" 1
expect_eq 'a title with a newline stays on its TAP line' \
    "$(grep -c '^ok 1 - two\\nlines$' "$T/check.log")" 1

runner 0 "$T/t/good.sh" "$T/t/bad.sh" "$T/t/crash.sh"
expect_eq 'a failing run: exit 1' "$?" 1
expect_eq 'a failing run: one closing line, the sum' "$(closing "$T/term")" '3 passed, 2 failed'
expect_eq 'a failing run: it is the last line' "$(tail -n 1 "$T/term")" '3 passed, 2 failed'
expect_eq 'the failure is repeated with its diagnostic' \
    "$(grep -c -e '^  not ok 2 - the wrong one$' -e '^  # expected:$' "$T/term")" 2
expect_eq 'the command that reruns the failing file' \
    "$(grep -c "^  again: make check BUILD=x TESTS=$T/t/bad.sh\$" "$T/term")" 1
expect_eq 'a file that died: its status and last words' \
    "$(grep -c -e '^FAIL  crash.sh: exit 3, no closing line$' -e '^  | the last words$' "$T/term")" 2
expect_eq 'the log holds every file'"'"'s own closing line' \
    "$(grep -c -e '^2 passed, 0 failed$' -e '^1 passed, 1 failed$' "$T/check.log")" 2

# a numeric suite reruns at each vector level the CPU has (KV_UNIT/isa
# --levels, all but its last line); each failure's command names its level
mkdir -p "$T/unit" "$T/num"
printf '#!/bin/sh\nprintf "l1\\nl2\\nnative\\n"\n' >"$T/unit/isa"; chmod +x "$T/unit/isa"
cp "$T/t/bad.sh" "$T/num/kvattn.sh"
(unset KVTOOLS_ISA KV_RUNNER; KV_LOG="$T/check.log" KV_VERBOSE=0 KV_AGAIN='make check' KV_UNIT="$T/unit" \
    sh "$KV_TOP/tests/run.sh" "$T/num/kvattn.sh" >"$T/term" 2>&1)
expect_eq 'a numeric suite at each level: the sum' "$(tail -n 1 "$T/term")" '3 passed, 3 failed'
expect_eq 'each level'"'"'s failure is rerun at that level alone' \
    "$(grep '^  again:' "$T/term")" "  again: make check TESTS=$T/num/kvattn.sh
  again: KVTOOLS_ISA=l1 make check TESTS=$T/num/kvattn.sh
  again: KVTOOLS_ISA=l2 make check TESTS=$T/num/kvattn.sh"

runner 1 "$T/t/good.sh" "$T/t/bad.sh"
expect_eq 'V=1: every TAP line and the stderr on the terminal' \
    "$(grep -c -e '^ok' -e '^not ok' -e 'a stray message' "$T/term")" 5
expect_eq 'V=1: the sum is the last line' "$(tail -n 1 "$T/term")" '3 passed, 1 failed'
done_testing
