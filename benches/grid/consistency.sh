#!/usr/bin/env bash
# AUTO run after run (issue 43): the grid (benches/grid/run_grid.sh) RUNS times on a quiet
# machine and RUNS times with two busy processes beside it (`yes > /dev/null`, started
# before and stopped by PID after each run), Open MPI at 2 and 4 ranks and MPICH at 2
# ranks, over shared memory and TCP: 108 points a run. Then consistency.py scores every
# run, counts the points where two runs chose differently, and draws the figure.
#
#   benches/grid/consistency.sh [--runs N] [--first K] [--results DIR] [--conditions "quiet loaded"]
#
# Defaults: 5 runs numbered from 1 (--first: from K, to add runs to a directory), results in benches/grid/results-consistency/<condition>-<k>/{openmpi,mpich}/.
# Takes about 3 minutes a quiet run and 17 a loaded one on the 2-core machine (Open MPI
# over TCP at 4 ranks beside two busy processes: 4 minutes for its 18 points).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RUNS=5
FIRST=1
RESULTS=$ROOT/benches/grid/results-consistency
CONDITIONS="quiet loaded"
while [ $# -gt 0 ]; do
    case $1 in
    --runs) RUNS=$2; shift ;;
    --first) FIRST=$2; shift ;;
    --results) RESULTS=$2; shift ;;
    --conditions) CONDITIONS=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
say() { printf '[consistency %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

BUSY=()
stop_busy() {
    for pid in "${BUSY[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${BUSY[@]}"; do wait "$pid" 2>/dev/null; done
    BUSY=()
}
trap stop_busy EXIT
trap 'exit 130' INT TERM

"$ROOT/scripts/build.sh" openmpi >/dev/null && "$ROOT/scripts/build.sh" mpich >/dev/null || { say "build failed"; exit 1; }
for k in $(seq "$FIRST" $((FIRST + RUNS - 1))); do
    for condition in $CONDITIONS; do
        dir=$RESULTS/$condition-$k
        mkdir -p "$dir"
        if [ "$condition" = loaded ]; then
            yes >/dev/null & BUSY+=($!)
            yes >/dev/null & BUSY+=($!)
            say "run $k, loaded: busy processes ${BUSY[*]}"
            wait_for_quiet=0
        else
            say "run $k, quiet"
            wait_for_quiet=${QUIET_WAIT:-120}
        fi
        QUIET_WAIT=$wait_for_quiet "$ROOT/benches/grid/run_grid.sh" --no-build --mpi openmpi --ranks "2 4" \
            --transports "shm tcp" --results "$dir/openmpi" >"$dir/openmpi.log" 2>&1 || say "openmpi run failed: $dir/openmpi.log"
        QUIET_WAIT=$wait_for_quiet "$ROOT/benches/grid/run_grid.sh" --no-build --mpi mpich --ranks 2 \
            --transports "shm tcp" --results "$dir/mpich" >"$dir/mpich.log" 2>&1 || say "mpich run failed: $dir/mpich.log"
        stop_busy
        python3 "$ROOT/benches/grid/score_auto.py" "$dir"/*/grid.csv | grep -v missed
    done
done
"$ROOT/.venv/bin/python" "$ROOT/benches/grid/consistency.py" "$RESULTS"
