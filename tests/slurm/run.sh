#!/bin/sh
# tests/slurm/run.sh (`make test-slurm`): a real single-node Slurm runs an
# experiment as 4 array tasks and the merge job, through
# experiments/slurm/submit.sh, and the merged database must equal the
# unsharded run's row for row (tests/helpers/same-rows.sh: timing and host
# columns aside). Not part of `make test`.
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
    for p in $pids; do kill "$p" 2>/dev/null || true; done
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
# Wait for both jobs to leave the queue, then read how they ended (kept MinJobAge seconds).
for i in $(seq 1 1200); do
    [ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] && break
    sleep 0.5
done
[ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] || fail "jobs $array and $merge still queued after 10 min"
t4=$(date +%s)
k=1
while [ "$k" -le "$SHARDS" ]; do
    st=$(scontrol show job "${array}_$k" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1)
    [ "$st" = COMPLETED ] || fail "array task $k: state '$st': $(cat "$D"/logs/*-shard-"${array}_$k".log 2>/dev/null | tail -n 5)"
    start=$(scontrol show job "${array}_$k" | sed -n 's/.*StartTime=\([^ ]*\).*/\1/p')
    say "array task $k/$SHARDS: COMPLETED (started $start)"
    k=$((k + 1))
done
st=$(scontrol show job "$merge" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1)
[ "$st" = COMPLETED ] || fail "merge job $merge: state '$st': $(cat "$D"/logs/*-merge-*.log 2>/dev/null | tail -n 5)"
say "merge job $merge: COMPLETED after the array: $(tail -n 1 "$D"/logs/*-merge-"$merge".log)"
say "4 tasks and the merge through Slurm: $((t4 - t3)) s after submission"

sh tests/helpers/same-rows.sh "$ref" "$out" >"$D/same-rows.out" 2>&1 ||
    fail "the merged database differs from the unsharded one:
$(head -c 3000 "$D/same-rows.out")"
runs=$(sqlite3 "$out" "select count(*) || ' runs, ' || (select count(*) from requests) || ' requests, shards ' || group_concat(distinct shard) from runs")
say "OK: $out ($runs) equals the unsharded $ref row for row (timing and host columns aside); $(( $(date +%s) - t0 )) s in all"
