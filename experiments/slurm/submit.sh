#!/bin/sh
# experiments/slurm/submit.sh: runs an experiment as N Slurm array tasks, one
# shard each, and merges their databases when all have succeeded
# (docs/scale.md).
#
#   sh experiments/slurm/submit.sh experiments/NAME.json N results/NAME.sqlite [--tasks LIST] [sbatch options...]
#
# From the repository root (the specs name their inputs relative to it):
#   1. builds kvreplay once (make) and copies the binary beside OUT as
#      OUT-without-.sqlite.kvreplay: every task, and every later resubmission,
#      runs that one build, whatever happens to build/ meanwhile;
#   2. plans the shards once (`--dry-run --shard 1/N`: it generates the spec's
#      models and transcripts into CACHE_ROOT and adds the calibrations the
#      reference file lacks, so the tasks only read them) and prints the plan;
#   3. submits `sbatch --array=1-N shard.sbatch` and `sbatch
#      --dependency=afterok:ARRAY merge.sbatch`, and prints both job ids.
# --tasks 3,5 resubmits only those array tasks (they resume their shards) and
# a new merge job after them. Further arguments go to both sbatch calls
# (--partition=..., --time=..., --account=...).
#
# Environment (defaults): SCALE (full), THREADS (1: sbatch --cpus-per-task
# follows it), CALIBRATION (results/calibration.json; empty for none),
# CACHE_ROOT (results/cache), LOG_DIR (the directory of OUT), MAKE (make),
# SBATCH (sbatch). Exit status: 0 when both jobs were submitted; 2 on a usage
# error; otherwise the failing command's.
set -eu
usage() { echo "usage: sh experiments/slurm/submit.sh experiments/NAME.json N OUT.sqlite [--tasks LIST] [sbatch options...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
SPEC=$1 N=$2 OUT=$3
shift 3
TASKS=""
if [ "${1:-}" = --tasks ]; then
    [ $# -ge 2 ] || usage
    TASKS=$2
    shift 2
fi
case "$N" in ''|*[!0-9]*) echo "submit.sh: N: expected a positive integer, got '$N'" >&2; exit 2 ;; esac
[ "$N" -ge 1 ] || usage
[ -f "$SPEC" ] || { echo "submit.sh: $SPEC: no such spec" >&2; exit 2; }
case "$OUT" in *.sqlite) ;; *) echo "submit.sh: $OUT: the output must end in .sqlite" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SCALE=${SCALE:-full}
THREADS=${THREADS:-1}
CALIBRATION=${CALIBRATION-results/calibration.json}
CACHE_ROOT=${CACHE_ROOT:-results/cache}
SBATCH=${SBATCH:-sbatch}
mkdir -p "$(dirname "$OUT")"
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
LOG_DIR=${LOG_DIR:-$(dirname "$OUT")}
KVREPLAY="${OUT%.sqlite}.kvreplay"

cd "$REPO"
if [ -z "$TASKS" ]; then
    ${MAKE:-make} -s build/kvreplay >&2
    cp build/kvreplay "$KVREPLAY.tmp.$$" && mv -f "$KVREPLAY.tmp.$$" "$KVREPLAY"
    echo "submit.sh: every task runs $KVREPLAY ($("$KVREPLAY" --version))" >&2
    "$KVREPLAY" experiment "$SPEC" --db "$OUT" --shard "1/$N" --dry-run --scale "$SCALE" --threads "$THREADS" \
        --cache-root "$CACHE_ROOT" ${CALIBRATION:+--calibration "$CALIBRATION"} | grep '^#' >&2
    ARRAY=1-$N
else
    [ -x "$KVREPLAY" ] || { echo "submit.sh: $KVREPLAY: absent: --tasks resubmits a run submit.sh started" >&2; exit 2; }
    ARRAY=$TASKS
fi
export KVREPLAY SPEC OUT N SCALE THREADS CALIBRATION CACHE_ROOT
name=$(basename "$SPEC" .json)
array=$("$SBATCH" --parsable --array="$ARRAY" --chdir="$REPO" --cpus-per-task="$THREADS" \
    --job-name="kvreplay-$name" --output="$LOG_DIR/$name-shard-%A_%a.log" --export=ALL "$@" "$HERE/shard.sbatch")
array=${array%%;*}
merge=$("$SBATCH" --parsable --dependency=afterok:"$array" --chdir="$REPO" --job-name="kvreplay-$name-merge" \
    --output="$LOG_DIR/$name-merge-%j.log" --export=ALL "$@" "$HERE/merge.sbatch")
merge=${merge%%;*}
echo "submit.sh: array job $array (tasks $ARRAY of $N shards), merge job $merge after it -> $OUT" >&2
echo "submit.sh: logs in $LOG_DIR/$name-shard-${array}_K.log and $name-merge-$merge.log" >&2
echo "$array $merge"
