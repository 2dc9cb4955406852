#!/bin/sh
# `make demo`: runs every experiment spec at the demo scale (or SCALE=full), then renders
# the figures and results/REPORT.md. Each database is rebuilt from scratch so the report
# describes one consistent run; pass RESUME=1 to complete an interrupted demo instead.
# The probe experiments start kvreplay serve themselves; their llama-server variants run
# when KVREPLAY_LLAMA_0949, KVREPLAY_LLAMA_C807 and KVREPLAY_LLAMA_STORIES hold the URLs
# of servers started as docs/probe.md says (otherwise they are skipped, with a message).
# The modeled TTFT of every run is priced at the reference calibrations of
# results/calibration.json (CALIBRATION=FILE to use another; a configuration the file
# lacks is measured once and added), so two demos give identical modeled-TTFT tables.
#   usage: sh experiments/demo.sh [KVREPLAY] [demo|full]
set -eu
KVR=${1:-build/kvreplay}
SCALE=${2:-demo}
[ -n "$SCALE" ] || SCALE=demo
THREADS=${THREADS:-2}
CALIBRATION=${CALIBRATION:-results/calibration.json}
EXPERIMENTS=${EXPERIMENTS:-"seed003 seed001 seed002 seed004 seed000 policies quirks traces batch probe-seed001 probe-seed003"}
mkdir -p results
start=$(date +%s)
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
