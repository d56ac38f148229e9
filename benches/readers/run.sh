#!/usr/bin/env bash
# Start-up and peak RSS per rank at 2 ranks: mdloader's from_adios against HydraGNN's own
# AdiosDataset -> DistDataset, on a HydraGNN ADIOS2 file of QM9-sized graphs (README.md).
#
#   benches/readers/run.sh openmpi|mpich "1e5 1e6" [DIR]
#
# Per size: writes DIR/qm9-<n>.bp once (HydraGNN's AdiosWriter up to READERS_WRITER_MAX
# graphs, default 1e5; above, the same layout with the adios2 package: startup.py
# write-columns) and, for the *-pickle variants, DIR/qm9-<n>.pkl (HydraGNN's
# SimplePickleWriter), checks the first batches of both paths equal (startup.py check /
# check-pickle, sizes up to 1e5, where HydraGNN imports), then READERS_RUNS (3) rounds of
# the variants READERS_VARIANTS ("mdl hydragnn"; also hydragnn-ddstore, mdl-pickle,
# hydragnn-pickle),
# each in its own job, alternated; prints every rank's line and the medians
# (report.py). READERS_DELETE=1 deletes each file after its size. Each job under timeout
# (READERS_TIMEOUT, 1800 s) and an address-space limit a rank (READERS_VMEM_KB, 9 GB;
# HydraGNN's path at 10^6 needs about 12).
# Needs: target/<mpi>/release/libmdloader.so, adios2 + torch_geometric + pyddstore +
# HydraGNN's imports (torch_scatter ...) in the venv, and a HydraGNN checkout: HYDRAGNN_SRC,
# default an archive of the fetched mirror at d251f816 in target/readers/.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/benches/readers
MPI=${1:-openmpi}; SIZES=${2:-1e5}; DIR=${3:-$ROOT/target/readers}
mkdir -p "$DIR"
if [ "$MPI" = openmpi ]; then PY=$ROOT/.venv/bin/python; RUN=(mpirun --bind-to none --oversubscribe);
else PY=$ROOT/.venv-mpich/bin/python; RUN=(mpiexec.mpich); fi
SRC=${HYDRAGNN_SRC:-$ROOT/target/readers/HydraGNN-d251f816}
if [ ! -d "$SRC" ]; then
    mkdir -p "$SRC.tmp"
    git --git-dir=/work/.mirror/ORNL+HydraGNN/repo archive d251f816 | tar -x -C "$SRC.tmp" && mv "$SRC.tmp" "$SRC"
fi
export MDLOADER_LIBRARY=$ROOT/target/$MPI/release/libmdloader.so PYTHONPATH=$SRC:$ROOT/python MDL_CALIBRATION=off
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONWARNINGS=ignore
[ -f "$MDLOADER_LIBRARY" ] || "$ROOT/scripts/build.sh" "$MPI"
LOG=$DIR/$MPI-results.txt
VARIANTS=${READERS_VARIANTS:-mdl hydragnn}
# the check needs HydraGNN's imports (not in .venv-mpich: torch_scatter, pyddstore)
HYDRAGNN_OK=0; "$PY" -c "import torch_scatter, pyddstore" 2>/dev/null && HYDRAGNN_OK=1
for n in $SIZES; do
    bp=$DIR/qm9-$n.bp pkl=$DIR/qm9-$n.pkl
    small=0; "$PY" -c "import sys; sys.exit(float('$n') > 1e5)" && small=1
    if [ -n "$(printf '%s\n' $VARIANTS | grep -v pickle)" ]; then
        if [ ! -d "$bp" ]; then
            # HydraGNN's writer where it imports and the size allows
            if [ $HYDRAGNN_OK = 1 ] && "$PY" -c "import sys; sys.exit(float('$n') > float('${READERS_WRITER_MAX:-1e5}'))"; then
                timeout 3600 "${RUN[@]}" -n 1 "$PY" -m mpi4py "$HERE/startup.py" write "$bp" "$n"
            else
                timeout 3600 "$PY" "$HERE/startup.py" write-columns "$bp" "$n"
            fi
        fi
        [ $small = 1 ] && [ $HYDRAGNN_OK = 1 ] && timeout "${READERS_TIMEOUT:-1800}" "${RUN[@]}" -n 2 "$PY" -m mpi4py \
            "$HERE/startup.py" check "$bp" 2>&1 | grep -E "^check|differs|Error" | sed "s/^/$MPI /" | tee -a "$LOG"
    fi
    if printf '%s\n' $VARIANTS | grep -q pickle; then
        [ -d "$pkl" ] || timeout 3600 "${RUN[@]}" -n 2 "$PY" -m mpi4py "$HERE/startup.py" write-pickle "$pkl" "$n" >/dev/null 2>&1
        [ $small = 1 ] && [ $HYDRAGNN_OK = 1 ] && timeout "${READERS_TIMEOUT:-1800}" "${RUN[@]}" -n 2 "$PY" -m mpi4py \
            "$HERE/startup.py" check-pickle "$pkl" 2>&1 | grep -E "^check|differs|Error" | sed "s/^/$MPI /" | tee -a "$LOG"
    fi
    for run in $(seq 1 "${READERS_RUNS:-3}"); do
        for how in $VARIANTS; do
            out=$DIR/$MPI-$how-$n-$run.log
            path=$bp; case $how in *pickle) path=$pkl ;; esac
            ( ulimit -v "${READERS_VMEM_KB:-9000000}"; timeout "${READERS_TIMEOUT:-1800}" "${RUN[@]}" -n 2 "$PY" -m mpi4py \
                "$HERE/startup.py" "$how" "$path" ) >"$out" 2>&1
            status=$?
            grep -E "^RESULT" "$out" | sed "s/^RESULT/$MPI run=$run/" | tee -a "$LOG"
            [ $status = 0 ] || echo "$MPI run=$run $how n=$n: exit status $status (log $out)" | tee -a "$LOG"
        done
    done
    [ "${READERS_DELETE:-0}" = 1 ] && rm -rf "$bp" "$pkl"
done
"$PY" "$HERE/report.py" "$LOG"
