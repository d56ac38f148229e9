#!/usr/bin/env bash
# The SchNet loop's wait for data against the library's fetch (issue 17, item 8): the
# QM9 SchNet example (python/examples/qm9_schnet.py) under DDP over gloo, 2 ranks on one
# node, fed by mdloader.pyg and by torch_geometric's DataLoader over an in-memory list,
# alternating runs (mdloader, pyg, mdloader, pyg, mdloader) for each MPI.
#
#   benches/pyg/schnet_wait.sh [OUT]      (default benches/pyg/schnet_wait.txt)
#
# Needs the binding tests' environments (tests/run_binding_tests.sh openmpi|mpich: the
# .venv / .venv-mpich with torch and torch_geometric, and target/qm9/qm9.qm9g) and both
# libraries (scripts/build.sh openmpi|mpich). Each run prints one line per epoch: the
# loop's wait for data (slowest rank) and, for mdloader, the library's fetch time and
# wait/fetch (worst rank); RESULT lines carry the same as JSON.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/benches/pyg/schnet_wait.txt}
ARGS="$ROOT/target/qm9/qm9.qm9g --train 8192 --val 256 --batch-size 64 --epochs 3 --hidden 32"
{
    echo "# python/examples/qm9_schnet.py target/qm9/qm9.qm9g --train 8192 --val 256 --batch-size 64 --epochs 3 --hidden 32 --feeder F"
    echo "# 2 ranks, one node, --bind-to none (Open MPI) / default (MPICH), commit $(git -C "$ROOT" rev-parse --short HEAD), $(date -u +%F), alternating runs"
} >"$OUT"
for mpi in openmpi mpich; do
    lib=$ROOT/target/$mpi/release/libmdloader.so
    if [ "$mpi" = openmpi ]; then
        py=$ROOT/.venv/bin/python
        launch=(mpirun.openmpi --oversubscribe --bind-to none -n 2 -x MDLOADER_LIBRARY -x PYTHONPATH)
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    else
        py=$ROOT/.venv-mpich/bin/python
        launch=(mpiexec.mpich -n 2 -genv MDLOADER_LIBRARY "$lib" -genv PYTHONPATH "$ROOT/python")
    fi
    for feeder in mdloader pyg mdloader pyg mdloader; do
        echo "## $mpi, feeder $feeder, load $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
        echo "$mpi, feeder $feeder ..." >&2
        # shellcheck disable=SC2086
        MDLOADER_LIBRARY=$lib PYTHONPATH=$ROOT/python timeout 600 "${launch[@]}" "$py" \
            "$ROOT/python/examples/qm9_schnet.py" $ARGS --feeder "$feeder" 2>/dev/null |
            grep -E '^(epoch|RESULT)' >>"$OUT" || echo "FAILED (exit ${PIPESTATUS[0]})" >>"$OUT"
    done
done
echo "wrote $OUT" >&2
