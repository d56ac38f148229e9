#!/usr/bin/env bash
# The C correctness tests at tens of ranks, oversubscribed on this machine's cores:
# random batches under every engine and AUTO (fetch_test), the sampler with prefetch
# (sampler_test) and the error agreement (hardening_test's settings, boundary and
# message cases) and the steps agreed ahead (lag_test, up to 32 ranks), on both sides of MDL_MATRIX_MAX_RANKS (32): at 16 and 32 ranks the
# step's agreement carries the request matrices, at 40 and 64 it does not. Timings at
# this oversubscription say nothing about speed; these runs check correctness only.
#
#   tests/run_scale_tests.sh openmpi|mpich|all
#
# Open MPI runs 16, 32, 40 and 64 ranks; MPICH 16 (its oversubscribed ranks test and
# yield, which is slow at more). MDL_SCALE_RANKS="16 64" overrides the Open MPI list.
# Needs the C tests built by tests/run_c_tests.sh (target/c-tests/<mpi>/).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
TIMEOUT=${MDL_TEST_TIMEOUT:-600}
LOGDIR=${MDL_TEST_LOGDIR:-$ROOT/target/test-logs}
BUILDROOT=${MDL_TEST_BUILDDIR:-$ROOT/target/c-tests}
mkdir -p "$LOGDIR"
mdl_select_mpis "${1:-all}"
# These cases test the engines: pinned to MDL_NODE_LOCAL=off unless a case says
# otherwise (tests/lib.sh, MDL_TEST_NODE_LOCAL).
MDL_TEST_NODE_LOCAL=off

run_case() {
    local mpi=$1 np=$2 name=$3 rc
    shift 3
    local log=$LOGDIR/$mpi-scale-$name.log
    mdl_mpirun "$mpi" "$np" "$log" "$@"
    rc=$?
    mdl_verdict "$mpi/scale/$name" $rc "$log"
}

for mpi in "${MPIS[@]}"; do
    bin=$BUILDROOT/$mpi
    if [ ! -x "$bin/fetch_test" ] || [ ! -x "$bin/sampler_test" ] || [ ! -x "$bin/hardening_test" ] \
        || [ ! -x "$bin/lag_test" ]; then
        fail "$mpi/scale (C tests not built: run tests/run_c_tests.sh $mpi first)"
        continue
    fi
    if [ "$mpi" = openmpi ]; then
        ranks=${MDL_SCALE_RANKS:-16 32 40 64}
    else
        ranks=16
    fi
    for np in $ranks; do
        # Few iterations: each fetch is a collective step of every rank.
        run_case "$mpi" "$np" "fetch_test-np$np" -- "$bin/fetch_test" --iters 10 --large 100 --seed "$np"
        # Enough samples that every rank has several steps at every rank count.
        run_case "$mpi" "$np" "sampler_test-np$np" -- "$bin/sampler_test" --samples $((np * 64))
        run_case "$mpi" "$np" "hardening_test-np$np" -- "$bin/hardening_test" --only 'settings/|boundary/|errors/' \
            --case-timeout 300
        # Sampler steps agreed ahead: no blocking collective, a late rank holds no one
        # up (MPICH needs its progress thread for that, see run_c_tests.sh).
        progress=()
        [ "$mpi" = mpich ] && progress=(MPIR_CVAR_ASYNC_PROGRESS=1)
        if [ "$np" -le 32 ]; then
            run_case "$mpi" "$np" "lag_test-np$np" "${progress[@]}" -- "$bin/lag_test"
        fi
        # The node-local path with hosts of 3 ranks emulated (MDL_NODE_KEY; the last host
        # smaller): its checks, and the sampler with the collective engine's owners
        # leaving out their node's requesters.
        if [ "$np" -le 32 ] && [ -x "$bin/node_local_test" ]; then
            run_case "$mpi" "$np" "node_local_test-np$np-3-per-host" MDL_TEST_RANKS_PER_HOST=3 -- \
                tests/node_key.sh "$bin/node_local_test" --iters 10
            run_case "$mpi" "$np" "sampler_test-np$np-node-local" MDL_NODE_LOCAL=on MDL_TEST_RANKS_PER_HOST=3 -- \
                tests/node_key.sh "$bin/sampler_test" --samples $((np * 64))
        fi
    done
done

mdl_summary
