#!/usr/bin/env bash
# The QM9 GNN (python/examples/qm9_gnn.py) fed by mdloader.torch and by torch's
# DataLoader over an in-memory list on each rank, side by side: the two feeders are
# interleaved, REPEATS times each, so that a shared machine's load falls on both alike.
#
#   benches/qm9_gnn/run.sh openmpi|mpich NP [REPEATS] [-- extra qm9_gnn.py arguments]
#
# Needs the binding tests' environment (.venv / .venv-mpich with torch) and the QM9 pack
# file (target/qm9/qm9.qm9g; tests/run_binding_tests.sh makes both). Writes each run's
# output to target/bench-qm9-gnn/, its RESULT line to <mpi>-np<NP>.jsonl there, and prints
# the medians
# (summarise.py).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MPI=${1:?usage: run.sh openmpi|mpich NP [REPEATS] [-- args]}
NP=${2:?usage: run.sh openmpi|mpich NP [REPEATS] [-- args]}
REPEATS=${3:-3}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
OUT=$ROOT/target/bench-qm9-gnn
mkdir -p "$OUT"
RESULTS=$OUT/$MPI-np$NP.jsonl
: >"$RESULTS"
if [ "$MPI" = openmpi ]; then
    PY=$ROOT/.venv/bin/python
    launch=(mpirun.openmpi --oversubscribe -n "$NP")
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
else
    PY=$ROOT/.venv-mpich/bin/python
    launch=(mpiexec.mpich -n "$NP")
fi
export MDLOADER_LIBRARY=$ROOT/target/$MPI/release/libmdloader.so PYTHONPATH=$ROOT/python
for repeat in $(seq "$REPEATS"); do
    for feeder in mdloader list; do
        echo "== $MPI np$NP run $repeat: $feeder ($(uptime | sed 's/.*load/load/'))"
        log=$OUT/$MPI-np$NP-$feeder-$repeat.log
        timeout 1800 "${launch[@]}" "$PY" "$ROOT/python/examples/qm9_gnn.py" "$ROOT/target/qm9/qm9.qm9g" \
            --feeder "$feeder" "$@" >"$log" 2>&1
        grep "^epoch" "$log"
        sed -n 's/^RESULT //p' "$log" >>"$RESULTS"
    done
done
"$PY" "$ROOT/benches/qm9_gnn/summarise.py" "$RESULTS"
