#!/usr/bin/env bash
# No deadlock beside another library's collective, with the library's defaults: the QM9
# GNN (python/examples/qm9_gnn.py, DDP over gloo, the library's prefetch thread) RUNS
# times per MPI and layout, under load (two busy processes beside the job), counting the
# runs that hang (killed by `timeout`) and those that fail otherwise.
#
#   benches/qm9_gnn/hang_runs.sh [RUNS]          (default 20)
#
# Layouts: `node`, 2 ranks on one node; `hosts`, two emulated hosts of 2 ranks each
# (network namespaces, tests/emulated_hosts.sh: MPI sees two nodes and moves everything
# between them over TCP; gloo meets on host A's address). Knobs: MDL_HANG_MPIS
# ("openmpi mpich"), MDL_HANG_LAYOUTS ("node hosts"), MDL_HANG_TIMEOUT (seconds a run
# may take, default 300), MDL_HANG_ARGS (the GNN's arguments after the pack),
# MDL_HANG_ENV (VAR=VALUE words passed to every rank, e.g. MDL_PROGRESS=off for the
# control without the progress thread and the closing barrier).
#
# Needs what scripts/test.sh builds: the libraries, the Python environments (.venv,
# .venv-mpich, with torch) and the QM9 pack (target/qm9/qm9.qm9g). Writes one line per
# run to benches/qm9_gnn/results/hang_runs.log and a summary at the end.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
RUNS=${1:-20}
MPIS=${MDL_HANG_MPIS:-openmpi mpich}
LAYOUTS=${MDL_HANG_LAYOUTS:-node hosts}
TIMEOUT=${MDL_HANG_TIMEOUT:-300}
read -r -a GNN_ARGS <<<"${MDL_HANG_ARGS:---train 2048 --val 256 --batch-size 32 --epochs 1 --hidden 32}"
PACK=$ROOT/target/qm9/qm9.qm9g
OUT=benches/qm9_gnn/results
mkdir -p "$OUT"
LOG=$OUT/hang_runs.log
[ -f "$PACK" ] || { echo "no $PACK: run tests/run_binding_tests.sh first" >&2; exit 2; }
source tests/emulated_hosts.sh

LOAD_PIDS=()
cleanup() {
    [ ${#LOAD_PIDS[@]} -gt 0 ] && kill "${LOAD_PIDS[@]}" 2>/dev/null
    mdl_hosts_delete
}
trap cleanup EXIT
for _ in 1 2; do
    yes >/dev/null &
    LOAD_PIDS+=($!)
done

venv_of() { [ "$1" = openmpi ] && echo "$ROOT/.venv" || echo "$ROOT/.venv-$1"; }

# launch <mpi> <layout> <run log>: one GNN run; returns its exit status.
launch() {
    local mpi=$1 layout=$2 log=$3 py
    py=$(venv_of "$mpi")/bin/python
    # Unbuffered, with the library's per-epoch lines: a hung run's log shows how far
    # it got.
    local env=(MDLOADER_LIBRARY="$ROOT/target/$mpi/release/libmdloader.so" PYTHONPATH="$ROOT/python"
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1 MDL_LOG=info ${MDL_HANG_ENV:-})
    local job=("$py" python/examples/qm9_gnn.py "$PACK" "${GNN_ARGS[@]}")
    if [ "$layout" = node ]; then
        if [ "$mpi" = openmpi ]; then
            env "${env[@]}" timeout -k 10 "$TIMEOUT" mpirun.openmpi --bind-to none -n 2 "${job[@]}" >"$log" 2>&1
        else
            env "${env[@]}" timeout -k 10 "$TIMEOUT" mpiexec.mpich -n 2 "${job[@]}" >"$log" 2>&1
        fi
        return
    fi
    # Two hosts: gloo meets on host A's address over the veth pair. Open MPI's pt2pt
    # one-sided component serves the other host's gets; it refuses
    # MPI_THREAD_MULTIPLE, so mpi4py asks for FUNNELED (the library then fetches
    # without its prefetch thread, and says so; the batches are collated in the
    # training thread, since BackgroundLoader's thread would call MPI). No progress
    # thread can run either: the library ends each engine step in a barrier.
    env+=(MASTER_ADDR="$MDL_HOSTS_SUBNET.1" GLOO_SOCKET_IFNAME="$MDL_HOSTS_IFACE")
    if [ "$mpi" = openmpi ]; then
        env+=(MPI4PY_RC_THREAD_LEVEL=funneled)
        job+=(--collate main)
        local x=() e
        for e in "${env[@]}"; do x+=(-x "${e%%=*}"); done
        mdl_hosts_openmpi "sm,pt2pt" "${x[@]}"
    else
        local g=() e
        for e in "${env[@]}"; do g+=(-genv "${e%%=*}" "${e#*=}"); done
        mdl_hosts_mpich "${g[@]}"
    fi
    (cd "$ROOT" && env "${env[@]}" timeout -k 10 "$TIMEOUT" ip netns exec "$MDL_HOST_A" "${MDL_HOSTS_LAUNCH[@]}" \
        "${job[@]}") >"$log" 2>&1 </dev/null
}

MDL_HOSTS_SUBNET=10.79.0
hosts_made=0
declare -A SUMMARY
{
    echo "# $(git rev-parse --short HEAD) $(date -u +%FT%TZ), $RUNS runs each, load: 2 busy processes; GNN ${GNN_ARGS[*]}; env: ${MDL_HANG_ENV:-defaults}"
} | tee "$LOG"
for layout in $LAYOUTS; do
    if [ "$layout" = hosts ] && [ $hosts_made -eq 0 ]; then
        mdl_hosts_create gnn "$MDL_HOSTS_SUBNET" "/tmp/mdl-gnn-nsexec-$$.sh" || { echo "cannot make the hosts" >&2; exit 2; }
        hosts_made=1
    fi
    for mpi in $MPIS; do
        ok=0 hung=0 failed=0
        for run in $(seq 1 "$RUNS"); do
            runlog=$OUT/hang-$mpi-$layout-$run.log
            start=$SECONDS
            launch "$mpi" "$layout" "$runlog"
            rc=$?
            took=$((SECONDS - start))
            if [ $rc -eq 0 ]; then
                verdict=ok
                ok=$((ok + 1))
                rm -f "$runlog"
            elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                verdict="HUNG (killed after $TIMEOUT s; $runlog)"
                hung=$((hung + 1))
            else
                verdict="FAILED (exit $rc; $runlog)"
                failed=$((failed + 1))
            fi
            echo "$mpi $layout run $run: $verdict, $took s, load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$LOG"
        done
        SUMMARY[$mpi-$layout]="$ok ok, $hung hung, $failed failed"
    done
done
echo "## summary" | tee -a "$LOG"
for key in "${!SUMMARY[@]}"; do echo "$key: ${SUMMARY[$key]}"; done | sort | tee -a "$LOG"
