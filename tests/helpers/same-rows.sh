#!/bin/sh
# tests/helpers/same-rows.sh A.sqlite B.sqlite: do two results databases hold
# the same runs, requests and steps, row for row? The columns that time a run
# or name the machine and process that ran it are left aside (they differ
# between any two runs of the same experiment); every other column, run_id
# included, must be equal. docs/scale.md lists them:
#   runs:     started_at finished_at resumes resumed_at argv hostname os_release
#             n_cpus calib_gflops calib_restore_gbs shard n_shards plan_sha256
#   requests: ttft_* restore_ms store_ms anchor_ms cold_shared (which process
#             measured the cold TTFT: a shard measures what another shard's
#             run measured in the unsharded experiment)
# Used by tests/test_shard.c (GNU parallel, resume) and tests/slurm/run.sh.
# Exit 0 when equal; 1 with the first differing rows of each side on stdout;
# 2 on a usage error or a database sqlite3 cannot read.
set -u
SQLITE3=${SQLITE3:-sqlite3}
[ $# -eq 2 ] || { echo "usage: same-rows.sh A.sqlite B.sqlite" >&2; exit 2; }
a=$1 b=$2
for f in "$a" "$b"; do
    [ -f "$f" ] || { echo "same-rows.sh: $f: no such file" >&2; exit 2; }
done
skip_runs=" started_at finished_at resumes resumed_at argv hostname os_release n_cpus calib_gflops calib_restore_gbs shard n_shards plan_sha256 "
skip_requests=" ttft_cold_ms ttft_reuse_ms ttft_cold_min_ms ttft_cold_max_ms ttft_reuse_min_ms ttft_reuse_max_ms restore_ms store_ms anchor_ms cold_shared "
status=0
for t in runs requests steps; do
    case $t in runs) skip=$skip_runs ;; requests) skip=$skip_requests ;; *) skip=" " ;; esac
    all=$("$SQLITE3" -readonly -batch -noheader "$a" "SELECT name FROM pragma_table_info('$t') ORDER BY cid") \
        || { echo "same-rows.sh: $a: cannot read table $t" >&2; exit 2; }
    cols=""
    for c in $all; do
        case "$skip" in *" $c "*) ;; *) cols="$cols${cols:+, }$c" ;; esac
    done
    q="ATTACH '$b' AS other;
       SELECT 'only in $a', * FROM (SELECT $cols FROM main.$t EXCEPT SELECT $cols FROM other.$t) LIMIT 5;
       SELECT 'only in $b', * FROM (SELECT $cols FROM other.$t EXCEPT SELECT $cols FROM main.$t) LIMIT 5;
       SELECT 'rows', (SELECT count(*) FROM main.$t), (SELECT count(*) FROM other.$t)
        WHERE (SELECT count(*) FROM main.$t) <> (SELECT count(*) FROM other.$t);"
    diff=$("$SQLITE3" -readonly -batch -noheader -separator ' | ' "$a" "$q" 2>&1) \
        || { echo "same-rows.sh: $t: $diff" >&2; exit 2; }
    if [ -n "$diff" ]; then
        echo "$t differs ($cols):"
        echo "$diff"
        status=1
    fi
done
exit $status
