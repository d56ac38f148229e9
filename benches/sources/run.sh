#!/usr/bin/env bash
# Start-up and peak RSS per rank, from_adios against HydraGNN's AdiosDataset -> DistDataset
# (emulated, see startup.py), side by side: the same file, one job each, alternated.
#   benches/sources/run.sh openmpi|mpich "1e5 1e6" [DIR]
# Needs target/<mpi>/release/libmdloader.so and adios2 in the venv. Each job under
# timeout (MDL_SOURCES_TIMEOUT, 1500 s) and a 9 GB address-space limit per rank;
# MDL_SOURCES_PATHS="sources" runs one side only. Each job's output: DIR/<path>-<n>.log.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MPI=${1:-openmpi}; SIZES=${2:-1e5}; DIR=${3:-$ROOT/target/sources-bench}
mkdir -p "$DIR"
if [ "$MPI" = openmpi ]; then PY=$ROOT/.venv/bin/python; RUN=(mpirun --bind-to none --oversubscribe);
else PY=$ROOT/.venv-mpich/bin/python; RUN=(mpiexec.mpich); fi
export MDLOADER_LIBRARY=$ROOT/target/$MPI/release/libmdloader.so PYTHONPATH=$ROOT/python MDL_CALIBRATION=off
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONWARNINGS=ignore
for n in $SIZES; do
    bp=$DIR/qm9-$n.bp
    [ -d "$bp" ] || timeout 1200 nice "$PY" "$ROOT/benches/sources/startup.py" write "$bp" "$n"
    for how in ${MDL_SOURCES_PATHS:-sources hydragnn}; do
        ( ulimit -v 9000000; timeout ${MDL_SOURCES_TIMEOUT:-1500} nice "${RUN[@]}" -n 2 "$PY" -m mpi4py \
            "$ROOT/benches/sources/startup.py" "$how" "$bp" ) >"$DIR/$how-$n.log" 2>&1
        status=$?
        grep -E "graphs=|Error|error" "$DIR/$how-$n.log" | sed "s/^/$MPI /"
        [ $status = 124 ] && echo "$MPI $how $n: timed out after ${MDL_SOURCES_TIMEOUT:-1500} s"
    done
done
