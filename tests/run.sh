#!/bin/sh
# Runs each cmocka test binary given as an argument from the repository root,
# and prints one closing line: "N passed, N failed, N skipped".
# Exit status: 0 when no test failed and every binary exited 0.
passed=0; failed=0; skipped=0; bad=0
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -n 1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
    if [ "$rc" -ne 0 ]; then
        bad=$((bad + 1))
        echo "tests/run.sh: $t exited with status $rc" >&2
        [ -z "$f" ] && failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$bad" -eq 0 ]
