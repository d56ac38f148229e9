#!/usr/bin/env bash
# A long fuzz of the C boundary: tests/c/fuzz_test.c over several seeds, both MPIs,
# 1 and 2 ranks, each job under `ulimit -v 6000000` and `timeout`.
#
#   benches/fuzz/run_long.sh [openmpi|mpich|all]
#
# A crash or a hang ends a job; the job is then restarted at the next case
# (--first K+1), so that one bug does not hide the cases after it. The crash counts as
# one failed case. After MDL_LONG_MAX_RESTARTS restarts a series (one MPI, rank count
# and seed) stops early and says so.
#
# Prints every failure (case, seed, what was hostile, the library's message or the
# signal), a table per series, and last a one-line summary for the README:
#   fuzz (long): N cases run, M failed (C crashes, T hangs); seeds ..., MPIs ..., 1-2 ranks, commit X
#
# Knobs (environment):
#   MDL_LONG_CASES         cases per series (default 100000)
#   MDL_LONG_SEEDS         seeds (default "1 2 3")
#   MDL_LONG_NPS           rank counts (default "1 2")
#   MDL_LONG_MAX_RESTARTS  restarts per series after crashes/hangs (default 50)
#   MDL_LONG_JOB_TIMEOUT   seconds per job (default 3600)
#   MDL_LONG_ENV           VAR=value words set on every rank (default
#                          MDL_CALIBRATION_SECONDS=0.02)
#   MDL_LONG_CASE_TIMEOUT  seconds before a case counts as hung (default 30; cases take
#                          milliseconds)
# Build the library first (scripts/build.sh openmpi|mpich).
set -u
# This measures the engines: on one machine the default node-local path would copy
# every sample from shared memory and no engine would run, so it is pinned off
# (export MDL_NODE_LOCAL=on to measure the default path instead).
export MDL_NODE_LOCAL=${MDL_NODE_LOCAL:-off}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/tests/lib.sh"
mdl_select_mpis "${1:-all}"
CASES=${MDL_LONG_CASES:-100000}
SEEDS=${MDL_LONG_SEEDS:-1 2 3}
NPS=${MDL_LONG_NPS:-1 2}
MAX_RESTARTS=${MDL_LONG_MAX_RESTARTS:-50}
TIMEOUT=${MDL_LONG_JOB_TIMEOUT:-3600}
CASE_TIMEOUT=${MDL_LONG_CASE_TIMEOUT:-30}
# Calibration measures for 0.4 s at every registration (a tenth of the cases): short
# here, so that the long run spends its time on cases.
read -r -a JOB_ENV <<<"${MDL_LONG_ENV:-MDL_CALIBRATION_SECONDS=0.02}"
OUT=$ROOT/target/fuzz-long
BIN=$OUT/bin
mkdir -p "$OUT" "$BIN"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)

total_run=0 total_failed=0 total_crashes=0 total_hangs=0
FAILURES=$OUT/failures.txt
: >"$FAILURES"
TABLE=()

for mpi in "${MPIS[@]}"; do
    lib=$ROOT/target/$mpi/release
    if ! mpicc.$mpi -std=c11 -O2 -g -Wall -Wextra -I"$ROOT/include" -I"$ROOT/tests/c" "$ROOT/tests/c/fuzz_test.c" \
        -o "$BIN/fuzz_test-$mpi" -L"$lib" -lmdloader -Wl,-rpath,"$lib" -lm >"$OUT/build-$mpi.log" 2>&1; then
        echo "build for $mpi failed:"
        cat "$OUT/build-$mpi.log"
        total_failed=$((total_failed + 1))
        continue
    fi
    for np in $NPS; do
        for seed in $SEEDS; do
            first=0 run=0 failed=0 crashes=0 hangs=0 restarts=0 start=$SECONDS note=""
            while [ "$first" -lt "$CASES" ]; do
                log=$OUT/$mpi-np$np-seed$seed-from$first.log
                (ulimit -v 6000000 && mdl_mpirun "$mpi" "$np" "$log" "${JOB_ENV[@]}" -- "$BIN/fuzz_test-$mpi" --seed "$seed" \
                    --first "$first" --cases $((CASES - first)) --max-failures 0 --case-timeout "$CASE_TIMEOUT")
                rc=$?
                nfail=$(grep -c '^FAIL case' "$log")
                grep '^FAIL case' "$log" | sed "s/^/$mpi np$np: /" >>"$FAILURES"
                # The library's messages for those failures (stderr of the failing ranks).
                grep -E '^\[rank [0-9]+\] case [0-9]+ ' "$log" | sed "s/^/    $mpi np$np: /" >>"$FAILURES"
                summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)
                if [ -n "$summary" ]; then
                    p=${summary%% passed*}
                    f=$(echo "$summary" | sed 's/.* \([0-9]*\) failed/\1/')
                    run=$((run + p + f))
                    failed=$((failed + f))
                    break
                fi
                # Crashed or hung: which case?
                line=$(grep -E '\] (CRASH|TIMEOUT).* in fuzz case [0-9]+' "$log" | head -n1)
                k=$(echo "$line" | sed -n 's/.* in fuzz case \([0-9]*\) .*/\1/p')
                if [ -z "$k" ]; then
                    echo "$mpi np$np seed $seed: job from case $first ended with exit $rc and no case named; see $log" |
                        tee -a "$FAILURES"
                    note=" (stopped: exit $rc without a case)"
                    failed=$((failed + 1))
                    break
                fi
                echo "$mpi np$np: ${line#*] }" >>"$FAILURES"
                grep -E '^\[rank [0-9]+\] case '"$k"' ' "$log" | sed "s/^/    $mpi np$np: /" >>"$FAILURES"
                run=$((run + k - first + 1))
                # A case that printed its FAIL line and then crashed counts once.
                if grep -q "^FAIL case $k:" "$log"; then failed=$((failed + nfail)); else failed=$((failed + nfail + 1)); fi
                if echo "$line" | grep -q TIMEOUT; then hangs=$((hangs + 1)); else crashes=$((crashes + 1)); fi
                first=$((k + 1))
                restarts=$((restarts + 1))
                if [ "$restarts" -ge "$MAX_RESTARTS" ]; then
                    note=" (stopped after $restarts restarts)"
                    break
                fi
            done
            secs=$((SECONDS - start))
            row=$(printf '%-8s %3s %6s %9s %7s %8s %6s %7s%s' "$mpi" "$np" "$seed" "$run" "$failed" "$crashes" "$hangs" "$secs" "$note")
            echo "$row"
            TABLE+=("$row")
            total_run=$((total_run + run))
            total_failed=$((total_failed + failed))
            total_crashes=$((total_crashes + crashes))
            total_hangs=$((total_hangs + hangs))
        done
    done
done

echo
echo "== failures (also in $FAILURES)"
grep -E '^(openmpi|mpich) np[0-9]+: (FAIL|CRASH|TIMEOUT)' "$FAILURES" | head -n 200
echo
echo "== distinct failures (what was hostile)"
sed -n 's/^\(openmpi\|mpich\) np[0-9]*: FAIL case [0-9]*: \(.*\) (reproduce.*/\2/p; s/^\(openmpi\|mpich\) np[0-9]*: \(CRASH[^)]*)\|TIMEOUT\) in fuzz case [0-9]* (\(.*\)), seed.*/\2: \3/p' "$FAILURES" |
    sed 's/ (batch [^)]*)//; s/ on rank [0-9]*//' | sort | uniq -c | sort -rn
echo
printf '%-8s %3s %6s %9s %7s %8s %6s %7s\n' MPI np seed cases failed crashes hangs seconds
printf '%s\n' "${TABLE[@]}"
echo
echo "fuzz (long): $total_run cases run, $total_failed failed ($total_crashes crashes, $total_hangs hangs);" \
    "seeds $SEEDS, MPIs ${MPIS[*]}, ranks $NPS, $CASES cases per series, commit $COMMIT"
[ "$total_failed" -eq 0 ]
