#!/usr/bin/env bash
# Fault injection (issue 19): a job of 3 ranks (tests/c/fault_test.c: init, register,
# fetches, a sampler epoch with prefetch, finalize) against the library built with the
# `test-hooks` feature, where the last rank's k-th fallible allocation fails
# (MDL_FAULT_ALLOC_AT=k, src/memory.rs), for every k from 1 until the job makes fewer
# allocations than k. Each run must end, within the timeout, with every rank reporting
# the same thing: every byte right, or the same call failed.
#
#   tests/run_fault_tests.sh openmpi|mpich|all
#
# Also, against the same library: one rank's cost model one ulp off
# (MDL_TEST_PERTURB_MODEL, tests/c/errors_test.c --model) at 2 and 3 ranks.
#
# Cases: both engines forced with MDL_NODE_LOCAL=off (calibration and every step
# through the engine), the collective engine without the request matrix in several
# rounds and folded into one, and the library's defaults (the node-local path).
# Knobs: MDL_FAULT_TIMEOUT seconds per run (default 30; a run that ends takes about a
# second), MDL_FAULT_MAX_K (default 2000), MDL_FAULT_CASES (the cases to run, by name;
# default all).
#
# Part of scripts/test.sh (about 5 minutes per MPI on 2 cores). Per-run output, k by k,
# with the library's frames where each allocation failed, is in
# target/test-logs/fault-<mpi>-<case>.log.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
mdl_select_mpis "${1:-all}"
RUN_TIMEOUT=${MDL_FAULT_TIMEOUT:-30}
MAX_K=${MDL_FAULT_MAX_K:-2000}
LOGDIR=${MDL_TEST_LOGDIR:-$ROOT/target/test-logs}
mkdir -p "$LOGDIR"

# build <mpi>: the library with the test hooks (its own target directory) and the tests
# that drive them.
build() {
    local mpi=$1 dir=$ROOT/target/$1-fault test
    (cd "$ROOT" && MPICC=mpicc.$mpi CARGO_TARGET_DIR=$dir cargo build --release --quiet --features test-hooks) &&
        ln -sf libmdloader.so "$dir/release/libmdloader.so.0" || return 1
    for test in fault_test errors_test; do
        "mpicc.$mpi" -std=c11 -O2 -Wall -Wextra -Werror -I"$ROOT/include" -I"$ROOT/tests/c" \
            "$ROOT/tests/c/$test.c" -o "$dir/$test" -L"$dir/release" -lmdloader \
            -Wl,-rpath,"$dir/release" || return 1
    done
}

# model_case <mpi> <np>: one rank's cost model one ulp off (MDL_TEST_PERTURB_MODEL):
# every step refused on every rank (errors_test --model).
model_case() {
    local mpi=$1 np=$2 log=$LOGDIR/fault-$1-model-np$2.log TIMEOUT=$RUN_TIMEOUT
    mdl_mpirun "$mpi" "$np" "$log" -- "$ROOT/target/$mpi-fault/errors_test" --model
    mdl_verdict "$mpi/model-fingerprint-np$np" $? "$log"
}

# one_run <mpi> <k> <log> <VAR=value...> -- <args>: 2 ranks plain, the last one injected.
one_run() {
    local mpi=$1 k=$2 log=$3 bin=$ROOT/target/$1-fault/fault_test
    shift 3
    local envs=() e
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local launcher
    if [ "$mpi" = openmpi ]; then
        launcher=(mpirun.openmpi --oversubscribe)
        for e in "${envs[@]}"; do launcher+=(-x "${e%%=*}"); done
    else
        launcher=(mpiexec.mpich)
        for e in "${envs[@]}"; do launcher+=(-genv "${e%%=*}" "${e#*=}"); done
    fi
    env "${envs[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout -k 5 "$RUN_TIMEOUT" "${launcher[@]}" -n 2 "$bin" "$@" : -n 1 env MDL_FAULT_ALLOC_AT="$k" "$bin" "$@" \
        >"$log" 2>"$log.err" </dev/null
}

# sweep <mpi> <name> <VAR=value...> -- <args>: every k; one PASS or FAIL line.
sweep() {
    local mpi=$1 name=$2 k rc log=$LOGDIR/fault-$1-$2.log results errors=0 oks=0 bad=()
    shift 2
    : >"$log"
    for ((k = 1; k <= MAX_K; k++)); do
        rm -f "$log.result".*
        one_run "$mpi" "$k" "$log.run" MDL_FAULT_RESULTS="$log.result" "$@"
        rc=$?
        # Each rank's RESULT line comes from a file of its own: the launcher merges the
        # ranks' standard output, and MPICH's cut one rank's line into another's.
        local lines
        lines=$(cat "$log.result".* 2>/dev/null)
        { echo "=== k=$k exit $rc"; echo "$lines"; cat "$log.run" "$log.run.err"; } >>"$log"
        results=$(echo "$lines" | grep -o '^RESULT .*' | sed 's/^RESULT \(error [0-9]*\).*/\1/' | sort | uniq -c)
        if [ $rc -ne 0 ]; then
            bad+=("k=$k: exit $rc$([ $rc -ge 124 ] && echo ' (hang)')")
        elif [ "$(echo "$lines" | grep -c '^RESULT ')" -ne 3 ] || [ "$(echo "$results" | wc -l)" -ne 1 ] ||
            echo "$results" | grep -q wrong; then
            bad+=("k=$k: $(echo $results)")
        elif ! grep -q "MDL_FAULT_INJECTED $k" "$log.run.err"; then
            break # the job made fewer than k fallible allocations on that rank: all walked
        elif echo "$results" | grep -q ok; then
            oks=$((oks + 1))
        else
            errors=$((errors + 1))
        fi
    done
    rm -f "$log.run" "$log.run.err" "$log.result".*
    local summary="k = 1..$((k - 1)): $errors failed on every rank, $oks recovered with every byte right"
    if [ ${#bad[@]} -eq 0 ]; then
        pass "$mpi/fault-$name ($summary)"
    else
        echo "bad runs: ${bad[*]}" >>"$log"
        MDL_FAIL_LOG_LINES=5 fail "$mpi/fault-$name ($summary; ${#bad[@]} bad: ${bad[*]:0:8})" "$log"
    fi
}

# wanted <case>: whether MDL_FAULT_CASES (names, default all) asks for it.
wanted() {
    [ -z "${MDL_FAULT_CASES:-}" ] || [[ " $MDL_FAULT_CASES " == *" $1 "* ]]
}

for mpi in "${MPIS[@]}"; do
    if ! build "$mpi" >"$LOGDIR/fault-$mpi-build.log" 2>&1; then
        fail "$mpi/fault-build" "$LOGDIR/fault-$mpi-build.log"
        continue
    fi
    wanted onesided && sweep "$mpi" onesided MDL_NODE_LOCAL=off -- onesided
    wanted collective && sweep "$mpi" collective MDL_NODE_LOCAL=off -- collective
    # No request matrix in the agreement and a small message limit: the counts travel in
    # the exchange, steps take several rounds, and samples over a round's budget go by gets.
    wanted collective-rounds &&
        sweep "$mpi" collective-rounds MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 MDL_MAX_MESSAGE_BYTES=6000 -- collective
    # A fetch the engine folds into one exchange (it exceeds the per-rank budget and fits
    # the limit), with a sample over the budget read by a get (fault_test --fold).
    wanted collective-fold && sweep "$mpi" collective-fold MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 -- collective --fold
    wanted defaults && sweep "$mpi" defaults MDL_NODE_LOCAL=on -- auto
    if wanted model; then
        model_case "$mpi" 2
        model_case "$mpi" 3
    fi
done
mdl_summary
