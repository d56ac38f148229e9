#!/usr/bin/env bash
# The demo ("main job"): 4 ranks fetch shuffled mini-batches from a 200k-sample dataset
# shaped like QM9 molecular graphs (0.3-3 KB) with each engine and with AUTO, interleaved
# step by step, verifying every byte, and print per batch size and engine the median
# step time, samples/s and MB/s of the job (c_examples/demo.c says how each is measured).
#
#   scripts/demo.sh                 Open MPI, 4 ranks
#   MDL_MPI=mpich scripts/demo.sh   MPICH
#   scripts/demo.sh --steps 20 --batches 16,256      options go to the demo program
#
# Installs what it needs on a fresh Debian machine (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MPI=${MDL_MPI:-openmpi}
RANKS=${MDL_RANKS:-4}
scripts/install-deps.sh
scripts/build.sh "$MPI"
mkdir -p target/demo
LIB=$PWD/target/$MPI/release
"mpicc.$MPI" -std=c11 -O2 -Iinclude c_examples/demo.c -o "target/demo/demo-$MPI" -L"$LIB" -lmdloader \
    -Wl,-rpath,"$LIB" -lm
echo "== demo: $RANKS ranks, $MPI, shared memory"
if [ "$MPI" = openmpi ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    exec timeout 1800 mpirun.openmpi --oversubscribe -n "$RANKS" "target/demo/demo-$MPI" "$@"
else
    exec timeout 1800 mpiexec.mpich -n "$RANKS" "target/demo/demo-$MPI" "$@"
fi
