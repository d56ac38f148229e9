#!/usr/bin/env bash
# mdloader.fairchem against fairchem's own AseDBDataset + get_dataloader (torch's
# DataLoader, data_list_collater), on the same .aselmdb files, 2 ranks, both MPIs:
#
#   benches/fairchem/run.sh [RUNS]          # default 2 runs per MPI and feeder
#
# Each run is tests/python/fairchem_train_case.py (fairchem's MaxAtomDistributedBatchSampler,
# max 120 atoms per batch): once training fairchem's small UMA model (DDP over gloo,
# --steps steps per epoch) and once taking the batches alone (--no-model, whole epochs).
# The feeders alternate, so that a change in the machine's load hits both. Every line goes
# to benches/fairchem/results.txt; the figures are in benches/fairchem/README.md.
#
# Needs scripts/install-fairchem.sh openmpi and mpich, and the library built for both.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUNS=${1:-2}
COUNT=${MDL_FAIRCHEM_BENCH_COUNT:-2000}
STEPS=${MDL_FAIRCHEM_BENCH_STEPS:-60}
DATA=$ROOT/target/fairchem-bench-data/$COUNT
OUT=$ROOT/benches/fairchem/results.txt
CASE=$ROOT/tests/python/fairchem_train_case.py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run() { # run <mpi> <feeder> <args...>
    local mpi=$1 feeder=$2
    shift 2
    local lib=$ROOT/target/$mpi/release/libmdloader.so
    if [ "$mpi" = openmpi ]; then
        timeout 900 mpirun.openmpi --oversubscribe --bind-to none -n 2 -x MDLOADER_LIBRARY="$lib" \
            -x PYTHONPATH="$ROOT/python" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
            "$ROOT/.venv-fairchem/bin/python" "$CASE" "$DATA" --count "$COUNT" --feeder "$feeder" "$@"
    else
        timeout 900 mpiexec.mpich -n 2 -env MDLOADER_LIBRARY "$lib" -env PYTHONPATH "$ROOT/python" \
            "$ROOT/.venv-fairchem-mpich/bin/python" "$CASE" "$DATA" --count "$COUNT" --feeder "$feeder" "$@"
    fi
}

{
    echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(git -C "$ROOT" rev-parse --short HEAD), $COUNT structures, 2 ranks, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for mpi in openmpi mpich; do
        for r in $(seq "$RUNS"); do
            for feeder in mdloader fairchem; do
                echo "## $mpi run $r $feeder, model, $STEPS steps per epoch"
                run "$mpi" "$feeder" --epochs 3 --steps "$STEPS" 2>&1 | grep -E "^(epoch|learned)"
                echo "## $mpi run $r $feeder, batches alone"
                run "$mpi" "$feeder" --epochs 3 --no-model 2>&1 | grep -E "^epoch"
            done
        done
    done
} | tee -a "$OUT"
