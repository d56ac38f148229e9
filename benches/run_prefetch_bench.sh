#!/usr/bin/env bash
# Prefetch benchmark (benches/prefetch_bench.c): exposed loading time with prefetch 0, 1
# and 2 against a simulated compute of 0, 0.5x and 2x the fetch time.
#
#   benches/run_prefetch_bench.sh [openmpi|mpich] [program options, e.g. --busy --batch 64]
#
# 2 ranks on shared memory (a rank and its prefetch thread per core). The table is
# printed and saved to target/bench/prefetch-<mpi>.md.
set -euo pipefail
# This measures the engines: on one machine the default node-local path would copy
# every sample from shared memory and no engine would run, so it is pinned off
# (export MDL_NODE_LOCAL=on to measure the default path instead).
export MDL_NODE_LOCAL=${MDL_NODE_LOCAL:-off}
cd "$(dirname "$0")/.."
MPI=${1:-openmpi}
shift || true
scripts/build.sh "$MPI"
LIB=$PWD/target/$MPI/release
mkdir -p target/bench
"mpicc.$MPI" -std=c11 -O2 -Iinclude -Ibenches benches/prefetch_bench.c -o "target/bench/prefetch_bench-$MPI" \
    -L"$LIB" -lmdloader -Wl,-rpath,"$LIB"
if [ "$MPI" = openmpi ]; then
    launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -n 2)
else
    launch=(mpiexec.mpich -n 2)
fi
timeout 600 "${launch[@]}" "target/bench/prefetch_bench-$MPI" "$@" | tee "target/bench/prefetch-$MPI.md"
