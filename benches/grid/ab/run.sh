#!/bin/bash
# A/B of AUTO beside two busy processes (`yes`, by PID), Open MPI over TCP at 2 and 4
# ranks: an old build's library and this checkout's, alternated, two rounds, with the
# arguments run_grid.sh gives a point. grid_bench (benches/grid/grid_bench.c, built
# against this checkout) is linked once and each round loads the library it is given.
#
#   benches/grid/ab/run.sh OLD_RELEASE_DIR RESULTS_DIR
#
# OLD_RELEASE_DIR: target/openmpi/release of the old build (a git worktree of the old
# commit, built with scripts/build.sh openmpi). Writes RESULTS_DIR/{old,new}-{1,2}.csv,
# .err and a progress file; score it with benches/grid/ab/analyze.py RESULTS_DIR.
set -u
old_lib=${1:?usage: run.sh OLD_RELEASE_DIR RESULTS_DIR}
out=${2:?usage: run.sh OLD_RELEASE_DIR RESULTS_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MDL_NODE_LOCAL=off
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
yes > /dev/null & Y1=$!
yes > /dev/null & Y2=$!
trap 'kill $Y1 $Y2' EXIT
for round in 1 2; do
  for which in old new; do
    lib=$root/target/openmpi/release; [ $which = old ] && lib=$old_lib
    for np in 2 4; do
      echo "$(date +%T) round $round $which np $np load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/progress"
      LD_LIBRARY_PATH=$lib timeout 900 mpirun.openmpi --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt \
        -n $np -x LD_LIBRARY_PATH -x MDL_NODE_LOCAL \
        "$root/target/grid/grid_bench-openmpi" --mpi openmpi --transport tcp --budget 3 --limit 12 --dd-budget 0.25 --dd-limit 3 --nmin 8 --nmax 200 --warmup 2 --skip-over 30 --csv "$out/$which-$round.csv" > /dev/null 2>> "$out/$which-$round.err"
    done
  done
done
echo "$(date +%T) done" >> "$out/progress"
