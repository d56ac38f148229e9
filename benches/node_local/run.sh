#!/usr/bin/env bash
# The node-local benchmark (node_bench.c): node-local path vs both engines vs a plain
# memcpy gather, side by side, one node, for each MPI and rank count.
#
#   benches/node_local/run.sh [openmpi] [mpich]      (default: both)
#
# Knobs: MDL_BENCH_RANKS (default "2 4"), MDL_BENCH_MODES ("fetch sampler": mdl_fetch_batch,
# and the built-in sampler with steps agreed ahead), MDL_BENCH_STEPS (30), MDL_BENCH_BATCHES
# (16,64,256,1024), MDL_BENCH_SIZES (256,1024,4096,16384), MDL_BENCH_VARYING ("0 1": samples
# of one size, and lengths varying around it, whose index the library keeps). Builds the library
# (scripts/build.sh) and the benchmark; writes benches/node_local/results/node_bench.csv
# and prints it, with `uptime` before and after each run (the machine may be shared).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MPIS=${*:-openmpi mpich}
RANKS=${MDL_BENCH_RANKS:-2 4}
MODES=${MDL_BENCH_MODES:-fetch sampler}
STEPS=${MDL_BENCH_STEPS:-30}
BATCHES=${MDL_BENCH_BATCHES:-16,64,256,1024}
SIZES=${MDL_BENCH_SIZES:-256,1024,4096,16384}
VARYING=${MDL_BENCH_VARYING:-0 1}
OUT=benches/node_local/results
mkdir -p "$OUT" target/bench
CSV=$OUT/node_bench.csv
LOG=$OUT/node_bench.log
: >"$LOG"
header=
for mpi in $MPIS; do
    CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} scripts/build.sh "$mpi" >/dev/null
    lib=$ROOT/target/$mpi/release
    "mpicc.$mpi" -std=c11 -O2 -Wall -Wextra -Iinclude benches/node_local/node_bench.c -o "target/bench/node_bench-$mpi" \
        -L"$lib" -lmdloader -Wl,-rpath,"$lib"
    for np in $RANKS; do
    for mode in $MODES; do
    for varying in $VARYING; do
        if [ "$mpi" = openmpi ]; then
            launch=(mpirun.openmpi --oversubscribe -n "$np")
        else
            launch=(mpiexec.mpich -n "$np")
        fi
        echo "# $mpi, $np ranks, $mode, varying $varying, $(git rev-parse --short HEAD), $(date -u +%FT%TZ); uptime before: $(uptime)" | tee -a "$LOG"
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MDL_LOG=error timeout 1800 "${launch[@]}" \
            "target/bench/node_bench-$mpi" --mpi "$mpi" --mode "$mode" --steps "$STEPS" --batches "$BATCHES" --sizes "$SIZES" \
            --varying "$varying" >"$OUT/run.csv"
        echo "# uptime after: $(uptime)" | tee -a "$LOG"
        if [ -z "$header" ]; then
            head -n1 "$OUT/run.csv" >"$CSV"
            header=1
        fi
        tail -n +2 "$OUT/run.csv" >>"$CSV"
        rm -f "$OUT/run.csv"
    done
    done
    done
done
column -s, -t "$CSV"
