#!/usr/bin/env bash
# Runs benches/engine_floor.c (MDLoader engines vs DDStore-style loop vs raw-MPI floors)
# at 2 and 4 ranks on one machine, shared-memory transport.
#
#   benches/run_engine_floor.sh [openmpi|mpich|all]      (default: openmpi)
#
# Results: target/bench/engine_floor/<mpi>-np<N>.csv, all rows in engine_floor.csv and
# the markdown tables in engine_floor.md (also printed).
#
# Knobs (environment): STEPS (200), WARMUP (20), SAMPLES_PER_RANK (20000),
# BATCHES (16,256), NPS ("2 4"), BENCH_TIMEOUT seconds per run (900), MPIRUN_ARGS
# (extra launcher arguments, e.g. "--bind-to none"), VARIANTS (engine_floor --variants).
#
# The numbers are only as good as the machine is quiet: check `uptime` first, other
# jobs on the same cores inflate every variant (the floors too, but not equally).
#
# Note: on a 2-core machine, 4 ranks are oversubscribed. Open MPI then still runs at
# microsecond scale; MPICH's blocking calls busy-poll and become ~1000x slower
# (ENVIRONMENT.md), which makes its 4-rank raw-MPI rows meaningless: MPICH defaults
# to 2 ranks only (override with NPS). Also, with more ranks than cores MPICH 4.0.2
# sometimes completes MPI_Win_flush_all before the gets' data arrived
# (tests/c/repro/mpich_flush_all_incomplete.c): the floor-gets rows then fail
# verification, and engine_floor exits non-zero.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHICH=${1:-openmpi}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
SAMPLES_PER_RANK=${SAMPLES_PER_RANK:-20000}
BATCHES=${BATCHES:-16,256}
TMO=${BENCH_TIMEOUT:-900}
OUT=$ROOT/target/bench/engine_floor
mkdir -p "$OUT"

case $WHICH in
openmpi) MPIS=(openmpi) ;;
mpich) MPIS=(mpich) ;;
all) MPIS=(openmpi mpich) ;;
*)
    echo "usage: $0 [openmpi|mpich|all]" >&2
    exit 2
    ;;
esac

status=0
: >"$OUT/engine_floor.md"
first_csv=1
for mpi in "${MPIS[@]}"; do
    lib=$ROOT/target/$mpi/release
    if [ ! -f "$lib/libmdloader.so" ]; then
        echo "missing $lib/libmdloader.so (MPICC=mpicc.$mpi CARGO_TARGET_DIR=target/$mpi cargo build --release)" >&2
        status=1
        continue
    fi
    bin=$OUT/engine_floor-$mpi
    if ! "mpicc.$mpi" -std=c11 -O2 -Wall -Wextra -I"$ROOT/include" -I"$ROOT/benches" "$ROOT/benches/engine_floor.c" \
        -o "$bin" -L"$lib" -lmdloader -Wl,-rpath,"$lib" -lm; then
        status=1
        continue
    fi
    if [ "$mpi" = openmpi ]; then
        nps=${NPS:-2 4}
    else
        nps=${NPS:-2}
    fi
    for np in $nps; do
        if [ "$mpi" = openmpi ]; then
            # Shared memory explicitly: vader BTL for the collectives; RMA on windows
            # from MPI_Win_allocate goes through Open MPI's shared-memory osc.
            launch=(mpirun.openmpi --oversubscribe --mca btl self,vader -n "$np")
        else
            launch=(mpiexec.mpich -n "$np")
        fi
        # shellcheck disable=SC2206 # word splitting of the extra arguments is intended
        launch+=(${MPIRUN_ARGS:-})
        extra=()
        [ -n "${VARIANTS:-}" ] && extra=(--variants "$VARIANTS")
        csv=$OUT/$mpi-np$np.csv
        md=$OUT/$mpi-np$np.md
        log=$OUT/$mpi-np$np.log
        echo "== $mpi, $np ranks ($(uptime | sed 's/.*load/load/'))" >&2
        if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 10 "$TMO" \
            "${launch[@]}" "$bin" --steps "$STEPS" --warmup "$WARMUP" \
            --samples-per-rank "$SAMPLES_PER_RANK" --batches "$BATCHES" \
            --label "$mpi-shm" --csv "$csv" --md "$md" "${extra[@]}" >"$log" 2>&1; then
            cat "$md" >>"$OUT/engine_floor.md"
            if [ $first_csv = 1 ]; then
                cat "$csv" >"$OUT/engine_floor.csv"
                first_csv=0
            else
                tail -n +2 "$csv" >>"$OUT/engine_floor.csv"
            fi
        else
            echo "FAILED: $mpi np=$np (log: $log)" >&2
            tail -n 40 "$log" >&2
            status=1
        fi
    done
done
cat "$OUT/engine_floor.md"
echo
echo "CSV: $OUT/engine_floor.csv"
exit $status
