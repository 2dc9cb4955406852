#!/bin/sh
# `make demo`: runs every experiment spec at the demo scale (or SCALE=full), then renders
# the figures and results/REPORT.md.
#
# Demo scale: each database results/NAME.sqlite is rebuilt from scratch, one experiment
# after the other at THREADS (2) threads, so the report describes one consistent run; pass
# RESUME=1 to complete an interrupted demo instead.
#
# Full scale (docs/experiments.md, "Full scale"): the databases are results/full/NAME.sqlite
# and are always resumed, so running `make demo SCALE=full` again after an interruption (a
# killed session, a reboot) picks up where it stopped; delete a database to run that
# experiment anew. The experiments go to LANES (2) lanes that run side by side, each
# experiment at THREADS (1) threads, niced, through experiments/fullscale.sh (which keeps
# `time -v` and the load in results/full/logs/); a lane takes the costliest experiment left
# (modeled by each spec's plan, `--dry-run --shard 1/1`). On a terminal one status line
# shows the experiments done, the share of the modeled work done, the time spent and an
# ETA (the rate measured since this start; before any progress, the modeled time at the
# 1.5x that long contexts cost over the 1,024-token calibration); otherwise it is quiet but
# for failures and the last line. Then results/full/costs.tsv (fullscale.sh costs) and the
# full-scale part of REPORT.md (FULL_ONLY=1 plots/render.sh).
#
# The probe experiments start kvreplay serve themselves; their llama-server variants run
# when KVREPLAY_LLAMA_0949, KVREPLAY_LLAMA_C807 and KVREPLAY_LLAMA_STORIES hold the URLs
# of servers started as docs/probe.md says (otherwise they are skipped, with a message).
# The modeled TTFT of every run is priced at the reference calibrations of
# results/calibration.json (CALIBRATION=FILE to use another; a configuration the file
# lacks is measured once and added), so two demos give identical modeled-TTFT tables.
#   usage: sh experiments/demo.sh [KVREPLAY] [demo|full]
# Environment (full scale; defaults): LANES (2), THREADS (1), FULL_DIR (results/full),
# LOG_DIR ($FULL_DIR/logs), CACHE_ROOT (results/cache), NO_RENDER (set: no costs and no
# figures at the end), EXPERIMENTS (the list below), SPEC_DIR (experiments: where NAME.json
# is), PROGRESS_S (10: seconds between status lines).
set -eu
KVR=${1:-build/kvreplay}
SCALE=${2:-demo}
[ -n "$SCALE" ] || SCALE=demo
CALIBRATION=${CALIBRATION:-results/calibration.json}
EXPERIMENTS=${EXPERIMENTS:-"seed003 seed001 seed002 seed004 seed000 policies quirks traces batch probe-seed001 probe-seed003"}
mkdir -p results
start=$(date +%s)

if [ "$SCALE" != full ]; then
    THREADS=${THREADS:-2}
    for e in $EXPERIMENTS; do
        spec=experiments/$e.json
        [ -f "$spec" ] || { echo "demo: $spec not found, skipped" >&2; continue; }
        db=results/$e.sqlite
        if [ "${RESUME:-0}" = 1 ]; then
            "$KVR" experiment "$spec" --db "$db" --scale "$SCALE" --threads "$THREADS" --calibration "$CALIBRATION" --resume
        else
            rm -f "$db" "$db-wal" "$db-shm"
            "$KVR" experiment "$spec" --db "$db" --scale "$SCALE" --threads "$THREADS" --calibration "$CALIBRATION"
        fi
    done
    sh plots/render.sh
    end=$(date +%s)
    echo "demo: $SCALE scale done in $((end - start)) s: results/REPORT.md, results/figures/" >&2
    exit 0
fi

# ---------------------------------------------------------------------------- full scale
THREADS=${THREADS:-1}
LANES=${LANES:-2}
FULL_DIR=${FULL_DIR:-results/full}
LOG_DIR=${LOG_DIR:-$FULL_DIR/logs}
CACHE_ROOT=${CACHE_ROOT:-results/cache}
PROGRESS_S=${PROGRESS_S:-10}
SQLITE3=${SQLITE3:-sqlite3}
SPEC_DIR=${SPEC_DIR:-experiments}
export KVREPLAY="$KVR" THREADS CALIBRATION FULL_DIR LOG_DIR CACHE_ROOT SQLITE3 SPEC_DIR
mkdir -p "$FULL_DIR" "$LOG_DIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvr-demo-full.XXXXXX")
# Each experiment runs in a session of its own (setsid), so that stopping the demo stops
# it (its kvreplay resumes later) without signalling whatever started the demo.
cleanup() {
    [ -n "${lanepids:-}" ] && kill $lanepids 2>/dev/null || true
    for f in "$WORK"/lane.*.pid; do
        [ -f "$f" ] && kill -TERM "-$(cat "$f")" 2>/dev/null || true
    done
    [ -n "${loadpid:-}" ] && kill "$loadpid" 2>/dev/null || true
    [ -n "${sleeppid:-}" ] && kill "$sleeppid" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
tty=0
[ -t 2 ] && tty=1
hms() { awk -v s="$1" 'BEGIN { s = int(s + 0.5); if (s < 0) s = 0
                               if (s >= 3600) printf "%dh%02dm", s / 3600, (s % 3600) / 60
                               else printf "%dm%02ds", s / 60, s % 60 }'; }

# The plan: per experiment and unit, its modeled seconds (the unit's reused work plus its
# share of its group's cold work, so that the units add up to the plan's total); a probe
# experiment (no units) counts as one unit of 60 s.
: >"$WORK/list"
for e in $EXPERIMENTS; do
    spec=$SPEC_DIR/$e.json
    [ -f "$spec" ] || { echo "demo: $spec not found, skipped" >&2; continue; }
    shard="--shard 1/1"  # the plan's costs (a spec that probes a live server has no units: no --shard)
    grep -q '"server"' "$spec" && shard=""
    "$KVR" experiment "$spec" --db /dev/null --scale full --threads "$THREADS" --calibration "$CALIBRATION" \
        --cache-root "$CACHE_ROOT" --dry-run $shard >"$WORK/$e.plan" 2>"$WORK/$e.plan.err" ||
        { cat "$WORK/$e.plan.err" >&2; echo "demo: $spec: planning failed" >&2; exit 2; }
    awk -v e="$e" '
        $1 == "#" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+\/[0-9]+$/ { u[$2] = $6; cold[$2] = $5; grp[$2] = $4; n[$4]++; nu++ }
        END { if (!nu) { printf "%s\t-1\t60\n", e; exit }
              for (k in u) printf "%s\t%s\t%.3f\n", e, k, u[k] + cold[k] / n[grp[k]] }' "$WORK/$e.plan" >"$WORK/$e.units"
    echo "$e" >>"$WORK/list"
done
[ -s "$WORK/list" ] || { echo "demo: no experiment to run" >&2; exit 2; }
cat $(sed "s|.*|$WORK/&.units|" "$WORK/list") >"$WORK/all.units"
total=$(awk -F'\t' '{ s += $3 } END { printf "%.3f", s }' "$WORK/all.units")
# costliest first
awk -F'\t' '{ s[$1] += $3 } END { for (e in s) printf "%s\t%.3f\n", e, s[e] }' "$WORK/all.units" |
    sort -t'	' -k2,2 -g -r | cut -f1 >"$WORK/order"

# done_work: the modeled seconds of work the databases hold (each unit's latest run counts
# for the share of its requests present; a probe experiment for any finished run).
done_work() {
    for e in $(cat "$WORK/list"); do
        db=$FULL_DIR/$e.sqlite
        [ -f "$db" ] || continue
        if grep -q "	-1	" "$WORK/$e.units"; then
            "$SQLITE3" -readonly -separator '	' "$db" \
                "SELECT '$e', -1, 1.0 FROM runs WHERE status = 'done' LIMIT 1" 2>/dev/null || true
        else
            "$SQLITE3" -readonly -separator '	' "$db" "SELECT '$e', r.unit, CASE WHEN coalesce(r.n_requests, 0) = 0
                    THEN 0.0 ELSE min(1.0, (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) * 1.0
                    / r.n_requests) END FROM runs r WHERE r.run_id IN
                    (SELECT max(run_id) FROM runs WHERE unit IS NOT NULL GROUP BY unit)" 2>/dev/null || true
        fi
    done | awk -F'\t' -v units="$WORK/all.units" '
        { f[$1 "\t" $2] = $3 }
        END { while ((getline line < units) > 0) { split(line, a, "\t"); k = a[1] "\t" a[2]
                  if (k in f) s += a[3] * f[k] }
              printf "%.3f", s }'
}

# Lanes: each takes the costliest experiment nobody has taken (claimed by mkdir).
lane() {
    child=""
    trap '[ -n "$child" ] && kill -TERM "-$child" 2>/dev/null; exit 143' INT TERM HUP
    for e in $(cat "$WORK/order"); do
        mkdir "$WORK/claim.$e" 2>/dev/null || continue
        setsid sh experiments/fullscale.sh run "$e" &
        child=$!
        echo "$child" >"$WORK/lane.$1.pid"
        rc=0
        wait "$child" || rc=$?
        child=""
        rm -f "$WORK/lane.$1.pid"
        if [ "$rc" = 0 ]; then
            echo "$e" >>"$WORK/done"
        else
            echo "$e" >>"$WORK/failed"
            [ "$tty" = 1 ] && printf '\r\033[K' >&2
            echo "demo: $e failed (exit $rc): see $LOG_DIR/$e.log" >&2
        fi
    done
}
sh experiments/fullscale.sh load >/dev/null 2>&1 &
loadpid=$!
lanepids=""
i=1
while [ "$i" -le "$LANES" ]; do
    lane "$i" &
    lanepids="$lanepids $!"
    i=$((i + 1))
done

base=$(done_work)
n_exp=$(wc -l <"$WORK/list")
while :; do
    alive=0
    for p in $lanepids; do kill -0 "$p" 2>/dev/null && alive=1; done
    if [ "$tty" = 1 ]; then
        now=$(date +%s)
        dw=$(done_work)
        nd=$(cat "$WORK/done" 2>/dev/null | wc -l)
        running=""
        for e in $(cat "$WORK/order"); do
            [ -d "$WORK/claim.$e" ] || continue
            cat "$WORK/done" "$WORK/failed" 2>/dev/null | grep -qx "$e" || running="$running $e"
        done
        line=$(awk -v t="$total" -v d="$dw" -v b="$base" -v el="$((now - start))" -v lanes="$LANES" '
            BEGIN { left = t - d; if (left < 0) left = 0
                    if (d - b > 0 && el > 0) eta = left * el / (d - b); else eta = 1.5 * left / lanes
                    printf "%.0f%%\t%.0f", (t > 0 ? 100 * d / t : 100), eta }')
        printf '\r\033[K[full] %d/%d experiments, %s of the modeled work, %s elapsed, ETA %s;%s' \
            "$nd" "$n_exp" "${line%%	*}" "$(hms $((now - start)))" "$(hms "${line#*	}")" \
            "${running:+ running:$running}" >&2
    fi
    [ "$alive" = 1 ] || break
    sleep "$PROGRESS_S" &  # waited for, so that a signal stops the demo at once
    sleeppid=$!
    wait "$sleeppid" || true
done
[ "$tty" = 1 ] && printf '\n' >&2
wait $lanepids 2>/dev/null || true
lanepids=""
if [ -s "$WORK/failed" ]; then
    echo "demo: full scale: failed: $(tr '\n' ' ' <"$WORK/failed")(logs in $LOG_DIR); run it again to resume" >&2
    exit 1
fi
if [ -z "${NO_RENDER:-}" ]; then
    sh experiments/fullscale.sh costs $(cat "$WORK/list") >"$FULL_DIR/costs.tsv.tmp.$$" &&
        mv "$FULL_DIR/costs.tsv.tmp.$$" "$FULL_DIR/costs.tsv"
    FULL_ONLY=1 sh plots/render.sh
fi
end=$(date +%s)
echo "demo: full scale done in $(hms $((end - start))): $FULL_DIR/*.sqlite, $FULL_DIR/figures/, $FULL_DIR/costs.tsv" >&2
