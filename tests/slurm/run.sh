#!/bin/sh
# tests/slurm/run.sh (`make test-slurm`): a real single-node Slurm runs an
# experiment as 4 array tasks and the merge job, through
# experiments/slurm/submit.sh, and the merged database must equal the
# unsharded run's row for row (tests/helpers/same-rows.sh: timing and host
# columns aside). Then a second submission whose task 1 is cancelled in the
# middle of its shard (scancel): the merge job never runs; `submit.sh ...
# --tasks 1` resubmits the task, which resumes its shard, and a new merge,
# whose database must equal the unsharded one too. Not part of `make test`.
#
# As root on Debian 12, no systemd needed: installs slurm-wlm and munge when
# absent; starts munged (--force, a key made here), slurmctld and slurmd in
# the foreground from a slurm.conf in a temporary directory (SLURM_CONF;
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, SlurmUser=root;
# spool, state, pid and log files in that directory, ports chosen free; one
# node with CPUs=$(nproc)). Every daemon it started is stopped by its pid,
# on success, failure or interruption. Nothing outside the temporary
# directory is written but build/ and the apt packages.
#
# Environment (defaults): SPEC (experiments/quirks.json, at demo scale: 15
# units), SHARDS (4), KEEP (unset: the temporary directory is removed; 1
# keeps it). Exit status: 0 when the merged database equals the unsharded
# one; 1 otherwise (the reason on stderr); 2 when not run as root or a
# package cannot be installed.
set -eu
cd "$(dirname "$0")/../.."
SPEC=${SPEC:-experiments/quirks.json}
SHARDS=${SHARDS:-4}
t0=$(date +%s)
say() { echo "test-slurm: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || { say "run as root: it installs slurm-wlm and munge and starts their daemons"; exit 2; }
missing=""
for c in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge mungekey:munge sqlite3:sqlite3; do
    command -v "${c%%:*}" >/dev/null 2>&1 || missing="$missing ${c#*:}"
done
if [ -n "$missing" ]; then
    say "installing slurm-wlm munge sqlite3 (missing:$missing)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge sqlite3 >/dev/null ||
        { say "apt-get install slurm-wlm munge failed"; exit 2; }
fi

D=$(mktemp -d /tmp/kvreplay-slurm.XXXXXX)
chmod 711 "$D"
pids=""
cleanup() {
    rc=$?
    sleep 1  # job steps that just ended are reaped by slurmd
    for p in $(echo $pids | tr ' ' '\n' | sort -rn); do kill "$p" 2>/dev/null || true; done  # slurmd first
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    [ -n "${KEEP:-}" ] && say "kept $D" || rm -rf "$D"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port pair (slurmctld, slurmd).
port_free() { ! (ss -ltn 2>/dev/null || netstat -ltn 2>/dev/null) | awk '{print $4}' | grep -q ":$1\$"; }
p=$((20000 + $$ % 20000))
while ! port_free "$p" || ! port_free $((p + 1)); do p=$((p + 2)); done

# munge: a key of our own, its socket in $D
mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/logs"
chmod 711 "$D/munge"
mungekey --create --keyfile="$D/munge/munge.key" || fail "mungekey"
munged -F --force --key-file="$D/munge/munge.key" --socket="$D/munge/socket" --pid-file="$D/munge/munged.pid" \
    --log-file="$D/munge/munged.log" --seed-file="$D/munge/seed" >"$D/munge/out" 2>&1 &
pids="$pids $!"

host=$(hostname -s)
cat >"$D/slurm.conf" <<EOF
ClusterName=kvreplay-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$p
SlurmdPort=$((p + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=kvreplay Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$D/slurm.conf"
for i in 1 2 3 4 5 6 7 8 9 10; do [ -S "$D/munge/socket" ] && break; sleep 0.5; done
[ -S "$D/munge/socket" ] || fail "munged did not start: $(cat "$D/munge/out")"
slurmctld -D -i >"$D/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D >"$D/slurmd.out" 2>&1 &
pids="$pids $!"
state=""
for i in $(seq 1 60); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.5
done
[ "$state" = idle ] || fail "the node is not idle after 30 s (state '$state'): $(tail -n 5 "$D/slurmctld.log" "$D/slurmd.log" 2>&1)"
say "slurmctld, slurmd and munged up (pids$pids), 1 node, $(nproc) CPUs, ports $p and $((p + 1)); $(sinfo -V)"

# The reference: the same experiment, unsharded (it adds the calibrations the tasks then read)
make -s -j2 build/kvreplay
ref="$D/whole.sqlite"
cal="$D/calibration.json"
t1=$(date +%s)
build/kvreplay experiment "$SPEC" --db "$ref" --scale demo --threads 1 --calibration "$cal" \
    --cache-root "$D/cache" 2>"$D/whole.err" || fail "the unsharded run: $(tail -n 3 "$D/whole.err")"
t2=$(date +%s)
say "unsharded $SPEC: $((t2 - t1)) s"

out="$D/merged.sqlite"
ids=$(SCALE=demo THREADS=1 CALIBRATION="$cal" CACHE_ROOT="$D/cache" LOG_DIR="$D/logs" \
      sh experiments/slurm/submit.sh "$SPEC" "$SHARDS" "$out") || fail "submit.sh"
array=${ids% *} merge=${ids#* }
t3=$(date +%s)
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1; }
# wait_gone JOBS: until none of them is queued or running (10 min at most)
wait_gone() {
    for i in $(seq 1 1200); do
        [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 0.5
    done
    fail "jobs $1 still queued after 10 min"
}
# check_done ARRAY TASKS MERGE OUT: every task and the merge COMPLETED, OUT equal to the reference
check_done() {
    for k in $2; do
        st=$(job_state "${1}_$k")
        [ "$st" = COMPLETED ] || fail "array task ${1}_$k: state '$st': $(tail -n 5 "$D"/logs/*-shard-"${1}_$k".log 2>/dev/null)"
        say "array task ${1}_$k: COMPLETED (started $(scontrol show job "${1}_$k" | sed -n 's/.*StartTime=\([^ ]*\).*/\1/p'))"
    done
    st=$(job_state "$3")
    [ "$st" = COMPLETED ] || fail "merge job $3: state '$st': $(tail -n 5 "$D"/logs/*-merge-"$3".log 2>/dev/null)"
    say "merge job $3: COMPLETED after the array: $(tail -n 1 "$D"/logs/*-merge-"$3".log)"
    sh tests/helpers/same-rows.sh "$ref" "$4" >"$D/same-rows.out" 2>&1 ||
        fail "$4 differs from the unsharded $ref:
$(head -c 3000 "$D/same-rows.out")"
    say "OK: $4 ($(sqlite3 "$4" "select count(*) || ' runs, ' || (select count(*) from requests) || ' requests, shards ' ||
        group_concat(distinct shard) || ', ' || sum(resumes) || ' resumed' from runs")) equals the unsharded run row for row"
}
wait_gone "$array,$merge"
t4=$(date +%s)
all=$(seq -s ' ' 1 "$SHARDS")
check_done "$array" "$all" "$merge" "$out"
say "$SHARDS tasks and the merge through Slurm: $((t4 - t3)) s after submission"

# A task cancelled in the middle of its shard, resubmitted, resumed.
out2="$D/merged2.sqlite"
ids=$(SCALE=demo THREADS=1 CALIBRATION="$cal" CACHE_ROOT="$D/cache" LOG_DIR="$D/logs" \
      sh experiments/slurm/submit.sh "$SPEC" "$SHARDS" "$out2" 2>/dev/null) || fail "submit.sh (second)"
array2=${ids% *} merge2=${ids#* }
db1="${out2%.sqlite}-shard1-of-$SHARDS.sqlite"
n=0
for i in $(seq 1 1200); do
    n=$(sqlite3 "$db1" "select count(*) from requests" 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 1 ] && break
    sleep 0.1
done
[ "$(job_state "${array2}_1")" = RUNNING ] || fail "task ${array2}_1 was not running when it had $n requests"
scancel "${array2}_1"
wait_gone "$array2"
st=$(job_state "${array2}_1")
units=$(sqlite3 "$db1" "select group_concat(json_extract(value, '\$[0]')) from shards, json_each(plan)
         where json_extract(value, '\$[1]') = 1")
total=$(sqlite3 "$ref" "select count(*) from requests r join runs u using (run_id) where u.unit in ($units)")
left=$(sqlite3 "$db1" "select count(*) from requests")
say "task ${array2}_1 cancelled ($st) with $left of its shard's $total requests stored; merge job $merge2: $(job_state "$merge2")"
[ "$left" -lt "$total" ] || fail "task 1 finished before it was cancelled: nothing to resume"
scancel "$merge2"  # its dependency can never be satisfied
ids=$(SCALE=demo THREADS=1 CALIBRATION="$cal" CACHE_ROOT="$D/cache" LOG_DIR="$D/logs" \
      sh experiments/slurm/submit.sh "$SPEC" "$SHARDS" "$out2" --tasks 1 2>/dev/null) || fail "submit.sh --tasks 1"
array3=${ids% *} merge3=${ids#* }
wait_gone "$array3,$merge3"
check_done "$array3" 1 "$merge3" "$out2"
[ "$(sqlite3 "$out2" "select sum(resumes) from runs")" -ge 1 ] || fail "no run of $out2 was resumed"
say "all passed in $(( $(date +%s) - t0 )) s"
