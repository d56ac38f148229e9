#!/usr/bin/env bash
# mdloader.DataLoader's samplers side by side (sampler_bench.py), 2 ranks, one MPI:
#
#   benches/python_sampler/run.sh openmpi|mpich [sampler_bench.py arguments]
#
# Two runs: a training step of 200 +- 100 us between batches, and none (loading alone).
# Needs the library (scripts/build.sh <mpi>) and the test environment (.venv for Open
# MPI, .venv-mpich; tests/run_binding_tests.sh makes them). Writes
# benches/python_sampler/results/<mpi>.txt (the tables, the commit and the load) and
# <mpi>-compute<us>.csv.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MPI=${1:?usage: benches/python_sampler/run.sh openmpi|mpich [arguments]}
shift
OUT=$ROOT/benches/python_sampler/results
mkdir -p "$OUT"
if [ "$MPI" = openmpi ]; then
    PY=$ROOT/.venv/bin/python
    launcher=(mpirun.openmpi --oversubscribe --bind-to none -n 2 -x MDLOADER_LIBRARY -x PYTHONPATH)
else
    PY=$ROOT/.venv-mpich/bin/python
    launcher=(mpiexec.mpich -n 2)
fi
[ -f "$ROOT/target/$MPI/release/libmdloader.so" ] || "$ROOT/scripts/build.sh" "$MPI"
export MDLOADER_LIBRARY=$ROOT/target/$MPI/release/libmdloader.so PYTHONPATH=$ROOT/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
    for compute in "200 --jitter-us 100" "0 --jitter-us 0"; do
        echo "# commit $(git -C "$ROOT" rev-parse --short HEAD), $(date -Is), load: $(cut -d' ' -f1-3 /proc/loadavg)"
        # shellcheck disable=SC2086 # compute holds two options
        "${launcher[@]}" "$PY" "$ROOT/benches/python_sampler/sampler_bench.py" --compute-us $compute \
            --csv "$OUT/$MPI-compute${compute%% *}.csv" "$@"
        echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
} | tee "$OUT/$MPI.txt"
