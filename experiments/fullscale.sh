#!/bin/sh
# experiments/fullscale.sh: the full-scale experiments on one shared machine,
# as the committed results/full/ was made (docs/scale.md; docs/experiments.md, "Full scale").
#
#   sh experiments/fullscale.sh run NAME [experiment options...]
#       kvreplay experiment experiments/NAME.json --scale full --threads $THREADS
#       --calibration $CALIBRATION --resume --db $FULL_DIR/NAME.sqlite, under
#       `nice -n 19` (other jobs go first) and /usr/bin/time -v (core time,
#       peak RSS) into $LOG_DIR/NAME.ATTEMPT.time, its start and end in
#       $LOG_DIR/runs.log. --resume is always on: after an interruption the
#       same command completes it (the same build: a run records its git
#       revision, and another build starts it anew). `SPEC=FILE` runs another
#       spec file into NAME's database (the same units in another order, e.g.).
#   sh experiments/fullscale.sh load
#       appends one line a minute to $LOG_DIR/load.log (time, load averages,
#       running kvreplay processes) until killed: the load the runs saw.
#   sh experiments/fullscale.sh costs [NAME...]
#       a tab-separated table of what each experiment's runs cost, from those
#       logs and databases: attempts, wall and core hours, peak RSS, the mean
#       load average while it ran, the units complete of the plan, the builds.
#
# Environment (defaults): KVREPLAY (build/kvreplay), THREADS (1), CALIBRATION
# (results/calibration.json), FULL_DIR (results/full), LOG_DIR
# (results/full/logs: not committed), CACHE_ROOT (results/cache), SQLITE3 (sqlite3),
# SPEC_DIR (experiments: NAME.json's directory).
set -eu
KVREPLAY=${KVREPLAY:-build/kvreplay}
THREADS=${THREADS:-1}
CALIBRATION=${CALIBRATION:-results/calibration.json}
FULL_DIR=${FULL_DIR:-results/full}
LOG_DIR=${LOG_DIR:-results/full/logs}
SQLITE3=${SQLITE3:-sqlite3}
CACHE_ROOT=${CACHE_ROOT:-results/cache}
SPEC_DIR=${SPEC_DIR:-experiments}
now() { date -u +%FT%TZ; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
usage() { echo "usage: sh experiments/fullscale.sh run NAME [options...] | load | costs [NAME...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
cmd=$1
shift
mkdir -p "$LOG_DIR" "$FULL_DIR"
case "$cmd" in
run)
    [ $# -ge 1 ] || usage
    name=$1
    shift
    spec=${SPEC:-$SPEC_DIR/$name.json}
    [ -f "$spec" ] || { echo "fullscale.sh: $spec: no such spec" >&2; exit 2; }
    n=$(ls "$LOG_DIR/$name".*.time 2>/dev/null | wc -l)
    echo "$(now) start $name attempt $n: $KVREPLAY $* (load $(load))" >>"$LOG_DIR/runs.log"
    rc=0
    nice -n 19 /usr/bin/time -v -o "$LOG_DIR/$name.$n.time" "$KVREPLAY" experiment "$spec" \
        --db "$FULL_DIR/$name.sqlite" --scale full --threads "$THREADS" --calibration "$CALIBRATION" \
        --cache-root "$CACHE_ROOT" --resume "$@" \
        >>"$LOG_DIR/$name.log" 2>&1 || rc=$?
    echo "$(now) end $name attempt $n: exit $rc (load $(load))" >>"$LOG_DIR/runs.log"
    exit $rc
    ;;
load)
    while :; do
        echo "$(now) $(load) kvr=$(pgrep -c -x kvreplay || true)" >>"$LOG_DIR/load.log"
        sleep 60
    done
    ;;
costs)
    [ $# -ge 1 ] || set -- $(cd "$FULL_DIR" && for f in *.sqlite; do [ -f "$f" ] && echo "${f%.sqlite}"; done)
    printf 'experiment\tattempts\tthreads\twall (h)\tCPU (core-hours)\tpeak RSS (GiB)\tmean load average\tunits complete\tbuild\n'
    for name in "$@"; do
        db="$FULL_DIR/$name.sqlite"
        # every attempt's elapsed, user+sys and peak RSS (GNU time -v), and the load between its start and end
        stats=$(for t in "$LOG_DIR/$name".*.time; do
                    [ -f "$t" ] || continue
                    awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, a, ":"); s = 0
                                                          for (i = 1; i <= n; i++) s = s * 60 + a[i]; w = s }
                                /User time/ { u = $2 } /System time/ { y = $2 }
                                /Maximum resident set size/ { r = $2 }
                                END { printf "%s %s %s\n", w, u + y, r }' "$t"
                done | awk '{ w += $1; c += $2; if ($3 > r) r = $3; n++ } END { printf "%d %.2f %.2f %.2f", n, w / 3600, c / 3600, r / 1048576 }')
        meanload=$(awk -v name="$name" '
            FNR == NR { if ($2 == "start" && $3 == name) s[$5] = $1; if ($2 == "end" && $3 == name) e[$5] = $1; next }
            { for (k in s) if ($1 >= s[k] && (!(k in e) || $1 <= e[k])) { sum += $2; n++; break } }
            END { if (n) printf "%.1f", sum / n; else printf "-" }' "$LOG_DIR/runs.log" "$LOG_DIR/load.log" 2>/dev/null || echo -)
        # a unit or probe variant is complete once one of its runs is (a probe variant interrupted
        # and run again leaves an unfinished row beside the finished one)
        units=$("$SQLITE3" -readonly "$db" "SELECT count(*) FROM (SELECT DISTINCT variant, sweep_name, sweep_value
                    FROM runs r WHERE status = 'done' AND
                    (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) >= coalesce(n_requests, 0))" 2>/dev/null || echo '?')
        planned=$("$KVREPLAY" experiment "$SPEC_DIR/$name.json" --db "$(mktemp -u)" --scale full --dry-run \
                     --cache-root "$CACHE_ROOT" 2>/dev/null | grep -c -e '# unit ' -e '# variant ' || true)
        builds=$("$SQLITE3" -readonly "$db" "SELECT group_concat(DISTINCT git_rev) FROM runs" 2>/dev/null || echo '?')
        echo "$stats" | while read -r att wall cpu rss; do
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s of %s\t%s\n' "$name" "$att" "$THREADS" "$wall" "$cpu" "$rss" \
                "$meanload" "$units" "$planned" "$builds"
        done
    done
    ;;
*) usage ;;
esac
