#!/usr/bin/env bash
# Soak test: benches/soak/soak.c at 2 ranks, 10^6 fetch steps (backend AUTO, random
# batches), each rank's RSS sampled every 10^5 steps; the table and the growth from the
# first sample to the last are printed (and saved to target/bench/soak-<mpi>.txt).
# Exit status non-zero if any rank's RSS grew by more than 5%, or a fetch failed.
#
#   benches/soak/run_soak.sh [openmpi|mpich]
#
# Knobs (environment): MDL_SOAK_STEPS (default 1000000), MDL_SOAK_EVERY (100000),
# MDL_SOAK_MAX_BATCH (32), MDL_SOAK_MAX_GROWTH (percent, 5), MDL_SOAK_TIMEOUT (s, 3600).
# Build the library first (scripts/build.sh <mpi>).
set -uo pipefail
# This measures the engines: on one machine the default node-local path would copy
# every sample from shared memory and no engine would run, so it is pinned off
# (export MDL_NODE_LOCAL=on to measure the default path instead).
export MDL_NODE_LOCAL=${MDL_NODE_LOCAL:-off}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MPI=${1:-openmpi}
case $MPI in openmpi | mpich) ;; *) echo "usage: $0 openmpi|mpich" >&2; exit 2 ;; esac
STEPS=${MDL_SOAK_STEPS:-1000000}
EVERY=${MDL_SOAK_EVERY:-100000}
BATCH=${MDL_SOAK_MAX_BATCH:-32}
GROWTH=${MDL_SOAK_MAX_GROWTH:-5}
TIMEOUT=${MDL_SOAK_TIMEOUT:-3600}
LIB=$ROOT/target/$MPI/release
OUT=$ROOT/target/bench
mkdir -p "$OUT"
"mpicc.$MPI" -std=c11 -O2 -g -Wall -Wextra -I"$ROOT/include" -I"$ROOT/tests/c" "$ROOT/benches/soak/soak.c" \
    -o "$OUT/soak-$MPI" -L"$LIB" -lmdloader -Wl,-rpath,"$LIB" || exit 2
if [ "$MPI" = openmpi ]; then
    launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --oversubscribe -n 2)
else
    launch=(mpiexec.mpich -n 2)
fi
echo "+ commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(date -Is), $MPI" | tee "$OUT/soak-$MPI.txt"
(ulimit -v 6000000 && timeout -k 10 "$TIMEOUT" "${launch[@]}" "$OUT/soak-$MPI" --steps "$STEPS" --every "$EVERY" \
    --max-batch "$BATCH" --max-growth "$GROWTH") 2>&1 | tee -a "$OUT/soak-$MPI.txt"
exit "${PIPESTATUS[0]}"
