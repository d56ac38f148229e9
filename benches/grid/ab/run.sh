#!/bin/bash
# A/B of AUTO beside two busy processes (`yes`, by PID), Open MPI over TCP at 2 and 4
# ranks: old (ba7c7ea, /work/ab-old) and new (this checkout's library) alternated, two
# rounds, with the arguments run_grid.sh gives a point; benches/grid/grid_bench.c built against this checkout (the C API is the same).
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MDL_NODE_LOCAL=off
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
yes > /dev/null & Y1=$!
yes > /dev/null & Y2=$!
trap 'kill $Y1 $Y2' EXIT
for round in 1 2; do
  for which in old new; do
    lib=$root/target/openmpi/release; [ $which = old ] && lib=/work/ab-old/target/openmpi/release
    for np in 2 4; do
      echo "$(date +%T) round $round $which np $np load $(cut -d' ' -f1 /proc/loadavg)" >> "$here/progress"
      LD_LIBRARY_PATH=$lib timeout 900 mpirun.openmpi --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt \
        -n $np -x LD_LIBRARY_PATH -x MDL_NODE_LOCAL \
        "$root/target/grid/grid_bench-openmpi" --mpi openmpi --transport tcp --budget 3 --limit 12 --dd-budget 0.25 --dd-limit 3 --nmin 8 --nmax 200 --warmup 2 --skip-over 30 --csv "$here/$which-$round.csv" > /dev/null 2>> "$here/$which-$round.err"
    done
  done
done
echo "$(date +%T) done" >> "$here/progress"
