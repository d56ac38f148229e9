#!/bin/bash
# Open MPI TCP 4 ranks, quiet: HEAD (/work/main) against 825a9f2 (/work/ab-old), alternated.
set -u
mkdir -p /tmp/ab
for round in 1 2; do
  for side in new old; do
    tree=/work/main; [ $side = old ] && tree=/work/ab-old
    (cd $tree && QUIET_WAIT=5 timeout 600 benches/grid/run_grid.sh --mpi openmpi --ranks 4 --transports tcp --results /tmp/ab/$side-$round > /tmp/ab/$side-$round.log 2>&1)
    echo "$(date +%T) $side $round: $(python3 /work/main/benches/grid/score_auto.py /tmp/ab/$side-$round/grid.csv 2>&1 | head -1)"
  done
done
