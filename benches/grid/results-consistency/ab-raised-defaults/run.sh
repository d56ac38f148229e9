#!/bin/bash
# A/B of AUTO on loaded Open MPI TCP: old (723d11f) vs new (HEAD) library, alternated.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
yes > /dev/null & Y=$!
trap "kill $Y" EXIT
for round in 1 2; do
  for which in old new; do
    lib=/work/main/target/openmpi/release; [ $which = old ] && lib=/work/ab-old/target/openmpi/release
    for np in 2 4; do
      echo "$(date +%T) round $round $which np $np load $(cut -d' ' -f1 /proc/loadavg)" >> benches/grid/results-consistency/ab-raised-defaults/progress
      LD_LIBRARY_PATH=$lib timeout 900 mpirun.openmpi --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt -n $np -x LD_LIBRARY_PATH \
        /work/main/target/grid/grid_bench-openmpi --mpi openmpi --transport tcp --csv benches/grid/results-consistency/ab-raised-defaults/$which-$round.csv > /dev/null 2>> benches/grid/results-consistency/ab-raised-defaults/$which-$round.err
    done
  done
done
echo "$(date +%T) done" >> benches/grid/results-consistency/ab-raised-defaults/progress
