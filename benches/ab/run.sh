#!/usr/bin/env bash
# The library at two commits, side by side in one run: the per-step benchmarks
# (benches/node_local's node_bench: the node-local path, both engines and a memcpy
# gather; benches/lag's lag_bench: sampler steps agreed ahead, with compute between
# them) run against the old and the new library in turn, ROUNDS times, alternating
# which goes first, so that a shared machine's load falls on both alike. The
# comparison (benches/ab/compare.py) gives per point the median of each and new / old.
#
#   benches/ab/run.sh OLD_REV [openmpi|mpich ...]       (default: both MPIs)
#
# "New" is the working tree. Knobs: MDL_AB_ROUNDS (5), MDL_AB_RANKS (2),
# MDL_AB_BATCHES (16,256,1024), MDL_AB_SIZES (256,4096), MDL_AB_STEPS (30).
# Output: benches/ab/results/<old>-<new>-<mpi>.csv and the comparison on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OLD=${1:?usage: benches/ab/run.sh OLD_REV [mpi ...]}
shift
MPIS=${*:-openmpi mpich}
ROUNDS=${MDL_AB_ROUNDS:-5}
RANKS=${MDL_AB_RANKS:-2}
BATCHES=${MDL_AB_BATCHES:-16,256,1024}
SIZES=${MDL_AB_SIZES:-256,4096}
STEPS=${MDL_AB_STEPS:-30}
old=$(git rev-parse --short "$OLD")
new=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo "+")
WORK=$ROOT/target/ab
OUT=benches/ab/results
mkdir -p "$WORK" "$OUT"

# The old commit's tree, built in a target directory of its own.
rm -rf "$WORK/old-tree"
git worktree prune
git worktree add --detach --force "$WORK/old-tree" "$old" >/dev/null
trap 'git worktree remove --force "$WORK/old-tree" >/dev/null 2>&1 || true' EXIT

for mpi in $MPIS; do
    launch=(mpirun.openmpi --oversubscribe -n "$RANKS")
    [ "$mpi" = mpich ] && launch=(mpiexec.mpich -n "$RANKS")
    for side in old new; do
        tree=$ROOT
        [ "$side" = old ] && tree=$WORK/old-tree
        (cd "$tree" && CARGO_BUILD_JOBS=1 MPICC=mpicc.$mpi CARGO_TARGET_DIR=$WORK/$side-$mpi \
            cargo build --release --quiet)
        lib=$WORK/$side-$mpi/release
        ln -sf libmdloader.so "$lib/libmdloader.so.0"
        for bench in node_local/node_bench lag/lag_bench; do
            "mpicc.$mpi" -std=c11 -O2 -Iinclude -Ibenches "benches/$bench.c" -o "$WORK/$side-$mpi-$(basename $bench)" \
                -L"$lib" -lmdloader -Wl,-rpath,"$lib" -lm
        done
    done
    csv=$OUT/$old-$new-$mpi.csv
    echo "side,round,bench,mode,batch,sample,loader,us" >"$csv"
    for round in $(seq 1 "$ROUNDS"); do
        order="old new"
        [ $((round % 2)) -eq 0 ] && order="new old"
        for side in $order; do
            echo "# $mpi round $round $side ($(uptime | sed 's/.*load/load/'))" >&2
            for mode in fetch sampler; do
                OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MDL_LOG=error timeout 900 "${launch[@]}" \
                    "$WORK/$side-$mpi-node_bench" --mpi "$mpi" --mode "$mode" --steps "$STEPS" \
                    --batches "$BATCHES" --sizes "$SIZES" --varying 1 |
                    awk -F, -v s="$side" -v r="$round" 'NR > 1 {
                        printf "%s,%s,node_local,%s,%s,%s,node,%s\n", s, r, $2, $4, $5, $7
                        printf "%s,%s,node_local,%s,%s,%s,onesided,%s\n", s, r, $2, $4, $5, $8
                        printf "%s,%s,node_local,%s,%s,%s,collective,%s\n", s, r, $2, $4, $5, $9 }' >>"$csv"
            done
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MDL_LOG=error MDL_NODE_LOCAL=off timeout 900 \
                "${launch[@]}" "$WORK/$side-$mpi-lag_bench" --rounds 5 2>/dev/null |
                awk -F, -v s="$side" -v r="$round" 'NR > 1 { printf "%s,%s,lag,sampler,%s,-,%s,%s\n", s, r, $1, $2, $3 }' >>"$csv"
        done
    done
    python3 benches/ab/compare.py "$csv"
done
