#!/bin/sh
# tests/fuzz/run.sh FUZZER SECONDS [TARGET...]: runs each fuzz target (all the
# binary lists, by default) for SECONDS under libFuzzer, one after the other.
#   seeds:    tests/fuzz/corpus/TARGET/ (read only)
#   new:      build-fuzz/corpus/TARGET/ (what the fuzzer added; not committed)
#   crashes:  tests/fuzz/crashes/TARGET/ (crash-*, leak-*, timeout-*, oom-*:
#             commit each one with its fix; `make test` replays them)
#   logs:     build-fuzz/log/TARGET.log
# Prints one line per target (executions, exec/s, edges covered, features,
# corpus size, new crash files) and exits 1 when any target found one.
set -u
bin=$1
secs=$2
shift 2
out=$(dirname "$bin")
mkdir -p "$out/log" "$out/corpus"
if [ $# -gt 0 ]; then targets="$*"; else
    targets=$(KVR_FUZZ_LIST=1 "$bin" 2>/dev/null | awk -F'\t' '$2 == "" {print $1}')
    KVR_FUZZ_LIST=1 "$bin" 2>/dev/null | awk -F'\t' '$2 != "" {print "kvr-fuzz: " $1 ": " $2}' >&2
fi
[ -n "$targets" ] || { echo "tests/fuzz/run.sh: no targets from $bin" >&2; exit 2; }
rss=${FUZZ_RSS_MB:-2048}
printf '%-24s %12s %9s %8s %8s %7s %8s\n' target execs exec/s cov ft corpus crashes
found=0
for t in $targets; do
    mkdir -p "$out/corpus/$t" "tests/fuzz/crashes/$t"
    before=$(ls "tests/fuzz/crashes/$t" | wc -l)
    KVR_FUZZ_TARGET=$t "$bin" -max_total_time="$secs" -timeout=25 -rss_limit_mb="$rss" -print_final_stats=1 \
        -artifact_prefix="tests/fuzz/crashes/$t/" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
        >"$out/log/$t.log" 2>&1
    rc=$?
    after=$(ls "tests/fuzz/crashes/$t" | wc -l)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log/$t.log" | tail -n 1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log/$t.log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$out/log/$t.log" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$out/log/$t.log" | tail -n 1 | cut -d' ' -f2)
    corp=$(grep -o 'corp: [0-9]*' "$out/log/$t.log" | tail -n 1 | cut -d' ' -f2)
    printf '%-24s %12s %9s %8s %8s %7s %8s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
        "$((after - before))"
    if [ "$after" -gt "$before" ] || [ "$rc" -ne 0 ]; then
        found=1
        echo "  -> $t: exit $rc, see $out/log/$t.log and tests/fuzz/crashes/$t/" >&2
    fi
    [ -n "$(ls -A "tests/fuzz/crashes/$t")" ] || rmdir "tests/fuzz/crashes/$t"
done
exit $found
