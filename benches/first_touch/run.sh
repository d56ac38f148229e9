#!/usr/bin/env bash
# One-sided steps on one node get cheaper as the job reads its windows: a peer's shard is
# mapped into a reader's address space page by page on first touch (a minor fault per
# 64 KB with the kernel's fault-around), which the calibration's small, warmed scratch
# window never shows. This runs the demo's engines (MDL_NODE_LOCAL=off, as between nodes)
# after W warm-up steps for several W, and counts the minor faults of 2,000 more steps
# of each engine.
#
#   benches/first_touch/run.sh [openmpi|mpich] [ranks]     -> benches/first_touch/results/
#   python3 benches/first_touch/plot.py benches/first_touch/results/<mpi>-<ranks>.csv
#
# Not in CI. Needs /usr/bin/time (Debian package `time`) for the fault counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
MPI=${1:-openmpi}
RANKS=${2:-4}
WARMUPS=${MDL_FIRST_TOUCH_WARMUPS:-5 100 400 1600}
BATCHES=${MDL_FIRST_TOUCH_BATCHES:-16 64}
scripts/build.sh "$MPI" >/dev/null
LIB=$PWD/target/$MPI/release
mkdir -p target/demo benches/first_touch/results
BIN=target/demo/demo-$MPI
"mpicc.$MPI" -std=c11 -O2 -Iinclude c_examples/demo.c -o "$BIN" -L"$LIB" -lmdloader -Wl,-rpath,"$LIB" -lm
if [ "$MPI" = openmpi ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    launch=(mpirun.openmpi --oversubscribe -n "$RANKS")
else
    launch=(mpiexec.mpich -n "$RANKS")
fi
out=benches/first_touch/results/$MPI-$RANKS.csv
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "# commit $(git rev-parse --short HEAD), $MPI, $RANKS ranks, $(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg)" >"$out"
echo "warmup,ranks,batch_per_rank,engine,steps,median_step_s,p90_step_s,samples_per_s,mb_per_s" >>"$out"
# Each batch size in its own job, so that no step before the measured ones is of another.
for batch in $BATCHES; do
    for w in $WARMUPS; do
        echo "batch $batch, warm-up $w steps" >&2
        timeout 1800 "${launch[@]}" "$BIN" --warmup "$w" --steps 50 --batches "$batch" \
            --engines onesided,collective,auto --no-verify --csv "$tmp" >/dev/null
        tail -n +2 "$tmp" | sed "s/^/$w,/" >>"$out"
    done
done
# Minor faults per rank (the whole process's, mean over the ranks): 2,050 steps of one
# engine against 50, batch 16, twice each (registration's own count varies by a few
# thousand from run to run at 4 ranks).
faults=benches/first_touch/results/$MPI-$RANKS-faults.txt
: >"$faults"
for engine in onesided collective onesided collective; do
    for steps in 50 2050; do
        n=$(timeout 1800 "${launch[@]}" /usr/bin/time -f "minflt %R" "$BIN" --batches 16 --warmup 0 --steps "$steps" \
            --engines "$engine" --no-verify 2>&1 | awk '/^minflt/ {s += $2; n++} END {printf "%.0f", s / n}')
        echo "$engine steps=$steps minor_faults_per_rank=$n" | tee -a "$faults"
    done
done
echo "wrote $out and $faults" >&2
