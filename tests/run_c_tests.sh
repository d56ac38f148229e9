#!/usr/bin/env bash
# Builds the C tests against include/mdloader.h and target/<mpi>/release/libmdloader.so
# and runs them under each MPI at several rank counts.
#
#   tests/run_c_tests.sh openmpi|mpich|all
#
# Prints one line per case, "PASS name" or "FAIL name", and as the very last line
# "N passed, M failed". Exit status is non-zero if anything failed. Each case's full
# output goes to target/test-logs/<name>.log and is printed when the case fails.
#
# Knobs (environment):
#   MDL_TEST_TIMEOUT   seconds per case (default 600); a hung job is killed and FAILs
#   MDL_TEST_ITERS     fetch_test iterations (default 1000; reduced automatically for
#                      MPICH above 2 ranks, where oversubscribed blocking calls busy-poll)
#   MDL_TEST_SEED      seed passed to the tests (default 1)
#   CFLAGS_EXTRA       extra compiler flags (e.g. -fsanitize=address)
#   MDL_TEST_LOGDIR    where the per-case logs go (default target/test-logs)
#   MDL_TEST_BUILDDIR  where the test binaries go (default target/c-tests); set both
#                      to private directories to run two copies of this script at once
#
# The library itself is not built here: build it first with
#   MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/openmpi cargo build --release
#   MPICC=mpicc.mpich   CARGO_TARGET_DIR=target/mpich   cargo build --release
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
WHICH=${1:-all}
TIMEOUT=${MDL_TEST_TIMEOUT:-600}
ITERS=${MDL_TEST_ITERS:-1000}
SEED=${MDL_TEST_SEED:-1}
LOGDIR=${MDL_TEST_LOGDIR:-$ROOT/target/test-logs}
BUILDROOT=${MDL_TEST_BUILDDIR:-$ROOT/target/c-tests}
mkdir -p "$LOGDIR"

mdl_select_mpis "$WHICH"
# These cases test the engines: pinned to MDL_NODE_LOCAL=off unless a case says
# otherwise (tests/lib.sh, MDL_TEST_NODE_LOCAL).
MDL_TEST_NODE_LOCAL=off

# build <mpi>: compiles the test programs; returns non-zero if anything failed.
build() {
    local mpi=$1 cc=mpicc.$1
    local libdir=$ROOT/target/$mpi/release
    local out=$BUILDROOT/$mpi
    local log=$LOGDIR/$mpi-build.log
    mkdir -p "$out"
    : >"$log"
    if ! command -v "$cc" >/dev/null; then
        echo "$cc not found" >>"$log"
        return 1
    fi
    if [ ! -f "$libdir/libmdloader.so" ]; then
        echo "missing $libdir/libmdloader.so; build it with:" >>"$log"
        echo "  MPICC=$cc CARGO_TARGET_DIR=target/$mpi cargo build --release" >>"$log"
        return 1
    fi
    if [ ! -f "$ROOT/include/mdloader.h" ]; then
        echo "missing include/mdloader.h" >>"$log"
        return 1
    fi
    # rpath (not LD_LIBRARY_PATH) so that each binary can only ever load the library
    # built for its own MPI: mixing Open MPI and MPICH in one process aborts.
    local flags=(-std=c11 -O2 -g -Wall -Wextra -I"$ROOT/include" -I"$ROOT/tests/c" ${CFLAGS_EXTRA:-})
    local link=(-L"$libdir" -lmdloader -Wl,-rpath,"$libdir" -lm)
    local ok=0 src name
    for src in tests/c/fetch_test.c tests/c/errors_test.c tests/c/idle_rank_test.c tests/c/sampler_test.c \
        tests/c/estimator_test.c tests/c/hardening_test.c tests/c/finalize_test.c tests/c/lag_test.c \
        tests/c/node_local_test.c tests/c/replica_test.c tests/c/progress_test.c tests/c/given_order_test.c \
        tests/c/rounds_test.c tests/c/large_count_test.c tests/c/mismatch_test.c c_examples/demo.c; do
        [ -f "$ROOT/$src" ] || continue
        name=$(basename "$src" .c)
        echo "+ $cc ${flags[*]} $src -o $out/$name ${link[*]}" >>"$log"
        # Build to a temporary name and rename: a test still running from an earlier
        # invocation keeps its (old) binary instead of crashing on a half-written one.
        if "$cc" "${flags[@]}" "$ROOT/$src" -o "$out/$name.tmp.$$" "${link[@]}" >>"$log" 2>&1; then
            mv -f "$out/$name.tmp.$$" "$out/$name"
        else
            rm -f "$out/$name.tmp.$$"
            ok=1
        fi
    done
    echo "+ $cc -shared -fPIC tests/c/shims/failing_type_commit.c -o $out/failing_type_commit.so" >>"$log"
    "$cc" -std=c11 -O2 -Wall -Wextra -shared -fPIC "$ROOT/tests/c/shims/failing_type_commit.c" \
        -o "$out/failing_type_commit.so" >>"$log" 2>&1 || ok=1
    echo "+ $cc -shared -fPIC tests/c/shims/failing_split.c -o $out/failing_split.so" >>"$log"
    "$cc" -std=c11 -O2 -Wall -Wextra -shared -fPIC "$ROOT/tests/c/shims/failing_split.c" \
        -o "$out/failing_split.so" >>"$log" 2>&1 || ok=1
    # Warnings are bugs in test code too: make them visible as a failure of the build.
    if grep -q "warning:" "$log"; then
        echo "compiler warnings (see above)" >>"$log"
        ok=1
    fi
    return $ok
}

# run_case <mpi> <np> <name> [VAR=value ...] -- <program> [args...]
run_case() {
    local mpi=$1 np=$2 name=$3 rc
    shift 3
    local log=$LOGDIR/$mpi-$name.log
    mdl_mpirun "$mpi" "$np" "$log" "$@"
    rc=$?
    mdl_verdict "$mpi/$name" $rc "$log"
}

for mpi in "${MPIS[@]}"; do
    if ! build "$mpi"; then
        fail "$mpi/build" "$LOGDIR/$mpi-build.log"
        continue
    fi
    pass "$mpi/build"
    bin=$BUILDROOT/$mpi
    if [ "$mpi" = openmpi ]; then
        nps=(1 2 3 4)
    else
        nps=(1 2 4)
    fi
    for np in "${nps[@]}"; do
        iters=$ITERS
        # MPICH's blocking calls busy-poll when ranks outnumber cores (ENVIRONMENT.md):
        # the test's own agreement reductions slow down, so run fewer iterations there.
        if [ "$mpi" = mpich ] && [ "$np" -gt 2 ]; then
            iters=$((ITERS / 4 > 50 ? ITERS / 4 : 50))
        fi
        run_case "$mpi" "$np" "fetch_test-np$np" -- "$bin/fetch_test" --iters "$iters" --seed "$SEED"
        run_case "$mpi" "$np" "errors_test-np$np" -- "$bin/errors_test" --seed "$SEED"
        if [ "$np" -ge 3 ]; then
            run_case "$mpi" "$np" "idle_rank_test-np$np" -- "$bin/idle_rank_test"
        fi
        run_case "$mpi" "$np" "sampler_test-np$np" -- "$bin/sampler_test"
        run_case "$mpi" "$np" "given_order_test-np$np" -- "$bin/given_order_test"
        run_case "$mpi" "$np" "estimator_test-np$np" -- "$bin/estimator_test"
        # docs/hardening.md. At 2 ranks one job per group of cases, so that a crash or
        # a hang in one group (the watchdog names the case) does not hide the others;
        # Open MPI also runs everything at 3 and 4 ranks in one job each.
        if [ "$np" -eq 2 ]; then
            for group in boundary calibration state errors onesided threads settings init; do
                run_case "$mpi" "$np" "hardening_test-np$np-$group" -- "$bin/hardening_test" \
                    --seed "$SEED" --case-timeout 60 --only "$group/"
            done
        elif [ "$np" -le 2 ] || [ "$mpi" = openmpi ]; then
            run_case "$mpi" "$np" "hardening_test-np$np" -- "$bin/hardening_test" --seed "$SEED" --case-timeout 60
        fi
        if [ "$np" -le 2 ]; then
            run_case "$mpi" "$np" "finalize_test-np$np" -- "$bin/finalize_test"
        fi
    done
    # A loader with an epoch still running at MPI_Finalize: prefetching on Open MPI; on
    # MPICH without prefetch, because a prefetch thread still inside MPI when the host
    # calls MPI_Finalize is erroneous MPI and aborts MPICH 4.0 now and then (README).
    prefetch=2
    [ "$mpi" = mpich ] && prefetch=0
    run_case "$mpi" 2 "finalize_test-np2-epoch" -- "$bin/finalize_test" --epoch --prefetch $prefetch
    # MDL_TIMEOUT: opt-in case, since it leaves MPI requests pending. Open MPI only:
    # MPICH 4.0 aborts in MPI_Finalize on any window never freed, and a timed-out
    # loader's window cannot be freed (its ranks are no longer in step).
    if [ "$mpi" = openmpi ]; then
        run_case "$mpi" 2 "hardening_test-np2-timeout" -- "$bin/hardening_test" --seed "$SEED" \
            --case-timeout 60 --only timeout/
    fi
    # Sampler steps agreed ahead (MDL_AGREEMENT_LAG): no blocking collective per step,
    # a late rank holds no one up; with lag 0 it does (the check can fail). And the
    # whole sampler suite with each step waiting for its own agreement, and with more
    # steps agreed ahead than an epoch has.
    # MPICH 4.0 moves a late rank's part of a get or of a multi-round reduction only
    # when that rank calls MPI, so that a sleeping rank holds the others up whatever
    # the library does; its asynchronous progress thread shows the library's part.
    progress=()
    [ "$mpi" = mpich ] && progress=(MPIR_CVAR_ASYNC_PROGRESS=1)
    for np in 2 3; do
        for lag in 0 2; do
            run_case "$mpi" $np "lag_test-np$np-lag$lag" MDL_AGREEMENT_LAG=$lag "${progress[@]}" -- "$bin/lag_test"
        done
    done
    # With MDL_TIMEOUT every wait is a test loop (blocking calls become nonblocking):
    # still exactly one agreement per step.
    run_case "$mpi" 3 "lag_test-np3-timeout" MDL_TIMEOUT=60 "${progress[@]}" -- "$bin/lag_test"
    # Ranks in different calls of one loader are told so on every rank, naming the
    # calls, with nothing done; and a rank whose peers wait in a collective of their own
    # is ended by the watchdog (or MDL_TIMEOUT's error), with a line naming its call.
    for np in 2 3; do
        run_case "$mpi" $np "mismatch_test-np$np" -- "$bin/mismatch_test"
    done
    # A rank that leaves a sampler epoch early and begins the next meets a step agreed
    # ahead: it is told at once (its verdict "PASS step-begin", and the job's exit
    # status 5, which MPICH keeps where its launcher drops the line), then ends the job.
    log=$LOGDIR/$mpi-mismatch_test-np2-step-begin.log
    mdl_mpirun "$mpi" 2 "$log" MDL_WAIT=yield -- "$bin/mismatch_test" --case step-begin
    if [ $? -eq 5 ] && ! grep -q '^FAIL step-begin' "$log"; then
        pass "$mpi/mismatch_test-np2-step-begin"
    else
        fail "$mpi/mismatch_test-np2-step-begin" "$log"
    fi
    for deadline in MDL_WATCHDOG MDL_TIMEOUT; do
        log=$LOGDIR/$mpi-mismatch_test-np2-$deadline.log
        mdl_mpirun "$mpi" 2 "$log" "$deadline=5" -- "$bin/mismatch_test" --case fetch-allreduce
        rc=$?
        said=$(grep -c 'mdl_fetch_batch.* waited .* for the other ranks.*makes a different call' "$log")
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ "$said" -ge 1 ] && [ "${MDL_ELAPSED:-0}" -lt 60 ]; then
            pass "$mpi/mismatch_test-np2-$deadline (the job ended in ${MDL_ELAPSED:-?} s, saying why)"
        else
            fail "$mpi/mismatch_test-np2-$deadline (exit $rc after ${MDL_ELAPSED:-?} s; $said lines naming the call)" "$log"
        fi
    done
    # Thread levels that differ between ranks (one rank MPI_THREAD_FUNNELED, an MPMD
    # launch): every rank fetches without prefetch instead of failing mdl_epoch_begin.
    run_case "$mpi" 1 "sampler_test-np2-mixed-thread-levels" -- "$bin/sampler_test" : -n 1 "$bin/sampler_test" --funneled
    run_case "$mpi" 1 "given_order_test-np2-mixed-thread-levels" -- "$bin/given_order_test" : -n 1 "$bin/given_order_test" --funneled
    # Said once per loader, not once per rank: with ranks 1 and 2 below MPI_THREAD_MULTIPLE,
    # rank 1 alone warns that prefetch cannot run, and that MDL_PROGRESS=on's thread
    # cannot; the others say it at info level.
    log=$LOGDIR/$mpi-thread_level_warnings-np3.log
    mdl_mpirun "$mpi" 1 "$log" MDL_PROGRESS=on -- "$bin/sampler_test" : -n 2 "$bin/sampler_test" --funneled
    rc=$?
    prefetch_warned=$(grep -c 'WARN.*prefetch needs MPI initialised with MPI_THREAD_MULTIPLE' "$log")
    progress_warned=$(grep -c 'WARN.*MDL_PROGRESS=on: the progress thread needs' "$log")
    from_rank1=$(grep 'WARN.*MPI_THREAD_MULTIPLE' "$log" | grep -vc 'WARN rank 1\]')
    if [ "$rc" -eq 0 ] && [ "$prefetch_warned" -eq 1 ] && [ "$progress_warned" -eq 1 ] && [ "$from_rank1" -eq 0 ]; then
        pass "$mpi/thread_level_warnings-np3 (one warning each, from rank 1)"
    else
        fail "$mpi/thread_level_warnings-np3 (exit $rc; $prefetch_warned prefetch and $progress_warned progress warnings, $from_rank1 not from rank 1)" "$log"
    fi
    run_case "$mpi" 2 "sampler_test-np2-lag0" MDL_AGREEMENT_LAG=0 -- "$bin/sampler_test"
    # The info log: one line per sampler epoch on rank 0 alone, saying which engine ran
    # and why; every line names its rank.
    log=$LOGDIR/$mpi-log_lines-np2.log
    mdl_mpirun "$mpi" 2 "$log" MDL_LOG=info "${progress[@]}" -- "$bin/lag_test"
    rc=$?
    epochs=$(grep -c '^\[mdloader INFO rank 0\] epoch, engine AUTO: .* steps: one-sided .*predicted .* us a step against .* collective; measured' "$log")
    elsewhere=$(grep -c '^\[mdloader INFO rank 1\] epoch' "$log")
    if [ "$rc" -eq 0 ] && [ "$epochs" -ge 2 ] && [ "$elsewhere" -eq 0 ]; then
        pass "$mpi/log_lines-np2 ($epochs epoch lines on rank 0, none on rank 1)"
    else
        fail "$mpi/log_lines-np2 (exit $rc; $epochs AUTO epoch lines on rank 0, $elsewhere on rank 1)" "$log"
    fi
    run_case "$mpi" 2 "sampler_test-np2-lag64" MDL_AGREEMENT_LAG=64 -- "$bin/sampler_test"
    # The sampler's collective engine in rounds (owners rebuild every rank's rounds).
    run_case "$mpi" 2 "sampler_test-np2-maxmsg2000" MDL_MAX_MESSAGE_BYTES=2000 -- "$bin/sampler_test"
    np=3
    [ "$mpi" = mpich ] && np=2
    # Message cap well below a batch's bytes but above every sample's size times the
    # rank count: the collective engine must cut each fetch into several rounds.
    run_case "$mpi" "$np" "fetch_test-np$np-maxmsg65536" MDL_MAX_MESSAGE_BYTES=65536 -- \
        "$bin/fetch_test" --iters $((ITERS / 2)) --seed $((SEED + 3))
    # Tiny message cap: forces the split paths of both engines, including samples
    # larger than the cap (common.h puts a few 4-12 KB samples in the dataset), which
    # the contract requires to work with every backend.
    run_case "$mpi" "$np" "fetch_test-np$np-maxmsg4096" MDL_MAX_MESSAGE_BYTES=4096 -- \
        "$bin/fetch_test" --iters $((ITERS / 2)) --seed $((SEED + 1))
    run_case "$mpi" "$np" "errors_test-np$np-maxmsg4096" MDL_MAX_MESSAGE_BYTES=4096 -- \
        "$bin/errors_test" --seed $((SEED + 1))
    # Above MDL_MATRIX_MAX_RANKS ranks the agreement carries no request matrices, and
    # the collective engine exchanges the request counts itself.
    run_case "$mpi" "$np" "fetch_test-np$np-nomatrix" MDL_MATRIX_MAX_RANKS=1 -- \
        "$bin/fetch_test" --iters $((ITERS / 4)) --seed $((SEED + 4))
    # Every rank its own copy of the index instead of one per node.
    run_case "$mpi" "$np" "fetch_test-np$np-private-index" MDL_SHARED_INDEX=off -- \
        "$bin/fetch_test" --iters $((ITERS / 4)) --seed $((SEED + 5))
    # The initial backend from the environment must agree with explicit settings.
    run_case "$mpi" 2 "fetch_test-np2-env-collective" MDL_BACKEND=collective -- \
        "$bin/fetch_test" --iters $((ITERS / 4)) --seed $((SEED + 2)) --phases world
    # A rank outside MPI (as in gloo's all-reduce) still serves a peer's get: MPICH
    # needs the library's progress thread for it (MDL_PROGRESS, on by default there;
    # with MDL_PROGRESS=off this case fails after --give-up seconds).
    run_case "$mpi" 2 "progress_test-np2" -- "$bin/progress_test" --give-up 60
    # Without MPI_THREAD_MULTIPLE no progress thread can run: one-sided steps then end
    # in a barrier (with MDL_PROGRESS=off these fail on MPICH after --give-up seconds).
    run_case "$mpi" 2 "progress_test-np2-funneled" -- "$bin/progress_test" --funneled --give-up 60
    run_case "$mpi" 2 "progress_test-np2-threads-stopped" -- "$bin/progress_test" --threads-stopped --give-up 60
    run_case "$mpi" 3 "progress_test-np3-funneled" -- "$bin/progress_test" --funneled --give-up 60
    # The library's defaults (node-local on): on one node every sample is a copy from
    # the node's shared memory, byte-exact under every backend setting.
    run_case "$mpi" 2 "fetch_test-np2-defaults" MDL_NODE_LOCAL= -- "$bin/fetch_test" --iters $((ITERS / 4)) --seed "$SEED"
    run_case "$mpi" 2 "sampler_test-np2-defaults" MDL_NODE_LOCAL= -- "$bin/sampler_test"
    run_case "$mpi" 2 "given_order_test-np2-defaults" MDL_NODE_LOCAL= -- "$bin/given_order_test"
    run_case "$mpi" 2 "errors_test-np2-defaults" MDL_NODE_LOCAL= -- "$bin/errors_test" --seed "$SEED"
    # Each of registration's communicator splits failing on one rank after completing
    # elsewhere: registration fails on every rank, each naming what it split for (the
    # failing rank returned at once, and left the others in the new communicator's
    # first collective), and the retry succeeds. One node of 2 ranks, in the order
    # registration splits: MPI_Comm_split_type for the shared-memory budget, the node's
    # index, then the mapping of the node's shards (MDL_WARMUP_MAP_BYTES, node-local
    # path off) or the node-local path's MPI node; MPI_Comm_split for the index's
    # leaders, then the node-local path's MDL_NODE_KEY nodes.
    for split in "off MPI_Comm_split_type 1 budget:sizing the node's shared memory" \
        "off MPI_Comm_split_type 2 index:sharing the index within the node" \
        "off MPI_Comm_split 1 leaders:exchanging the index between nodes" \
        "off MPI_Comm_split_type 3 map:finding the node's shards to map" \
        "on MPI_Comm_split_type 3 node-local:placing the shards in node-shared memory" \
        "on MPI_Comm_split 2 node-key:placing the shards in node-shared memory"; do
        read -r node_local call nth what <<<"$split"
        run_case "$mpi" 2 "errors_test-np2-split-${what%%:*}-fails" MDL_NODE_LOCAL=$node_local -- env \
            LD_PRELOAD="$bin/failing_split.so" MDL_SHIM_RANK=1 MDL_SHIM_CALL=$call MDL_SHIM_NTH=$nth \
            "$bin/errors_test" --split-fails "${what#*:}"
    done
    # The node-local path (MDL_NODE_LOCAL=on): one node of 2 ranks; two emulated hosts
    # of 2 ranks (tests/node_key.sh splits MPI's node by MDL_NODE_KEY; the namespaces of
    # tests/run_node_tests.sh are real hosts to MPI); 4 hosts of one rank (nothing to
    # share: the plain window). Byte-exact fetches, node-local and remote bytes checked.
    # Then the suites that check every byte under every engine and every bad input on
    # one rank failing on all, with the node-local path on, and the sampler's collective
    # engine in rounds (owners rebuild the requests of the ranks of other nodes only).
    run_case "$mpi" 2 "node_local_test-np2" -- "$bin/node_local_test" --seed "$SEED"
    run_case "$mpi" 4 "node_local_test-np4-2hosts" MDL_TEST_RANKS_PER_HOST=2 -- \
        tests/node_key.sh "$bin/node_local_test" --seed "$SEED"
    run_case "$mpi" 4 "node_local_test-np4-1rank-per-host" MDL_TEST_RANKS_PER_HOST=1 -- \
        tests/node_key.sh "$bin/node_local_test" --seed "$SEED" --iters 20
    run_case "$mpi" 4 "fetch_test-np4-2hosts-node-local" MDL_NODE_LOCAL=on MDL_TEST_RANKS_PER_HOST=2 -- \
        tests/node_key.sh "$bin/fetch_test" --iters $((ITERS / 10)) --seed $((SEED + 6))
    run_case "$mpi" 4 "fetch_test-np4-2hosts-node-local-maxmsg4096" MDL_NODE_LOCAL=on MDL_MAX_MESSAGE_BYTES=4096 \
        MDL_TEST_RANKS_PER_HOST=2 -- tests/node_key.sh "$bin/fetch_test" --iters $((ITERS / 10)) --seed $((SEED + 7)) --phases world
    run_case "$mpi" 2 "errors_test-np2-node-local" MDL_NODE_LOCAL=on -- "$bin/errors_test" --seed "$SEED"
    run_case "$mpi" 4 "errors_test-np4-2hosts-node-local" MDL_NODE_LOCAL=on MDL_TEST_RANKS_PER_HOST=2 -- \
        tests/node_key.sh "$bin/errors_test" --seed "$SEED"
    run_case "$mpi" 4 "sampler_test-np4-2hosts-node-local-maxmsg2000" MDL_NODE_LOCAL=on MDL_MAX_MESSAGE_BYTES=2000 \
        MDL_TEST_RANKS_PER_HOST=2 -- tests/node_key.sh "$bin/sampler_test"
    # Replica groups (mdl_init_replicated): groups of 1, 2 and the whole job, one group
    # per emulated host with and without the node-local path, and the collective
    # engine in rounds (owners rebuild their group's requests); every byte must come
    # from the rank's own group and the sampler must still see every sample once.
    for g in 1 2 4; do
        run_case "$mpi" 4 "replica_test-np4-group$g" -- "$bin/replica_test" $g --seed "$SEED"
    done
    # Groups of 2 among 8 ranks: owners scan their group's places in the epoch instead
    # of walking their samples (fewer when P > g^2), and must find the same requests.
    run_case "$mpi" 8 "replica_test-np8-group2" -- "$bin/replica_test" 2 --seed "$SEED"
    run_case "$mpi" 4 "replica_test-np4-2hosts-per-node" MDL_TEST_RANKS_PER_HOST=2 -- \
        tests/node_key.sh "$bin/replica_test" 0 --seed "$SEED"
    run_case "$mpi" 4 "replica_test-np4-2hosts-per-node-node-local" MDL_NODE_LOCAL=on MDL_TEST_RANKS_PER_HOST=2 -- \
        tests/node_key.sh "$bin/replica_test" 0 --seed "$SEED"
    run_case "$mpi" 4 "replica_test-np4-group2-maxmsg2000" MDL_MAX_MESSAGE_BYTES=2000 -- \
        "$bin/replica_test" 2 --seed "$SEED"
    # mdl_fetch_batch without the request matrix (as above 32 ranks): a step that fits
    # MDL_MAX_MESSAGE_BYTES takes one exchange though it exceeds the per-rank budget.
    run_case "$mpi" 4 "rounds_test-np4" MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 MDL_MAX_MESSAGE_BYTES=40000 -- \
        "$bin/rounds_test" --limit 40000
    run_case "$mpi" 2 "rounds_test-np2" MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 MDL_MAX_MESSAGE_BYTES=20000 -- \
        "$bin/rounds_test" --limit 20000
    # A step of more than 2^31 - 1 bytes (beyond MPI_Alltoallv's int counts): one
    # exchange by default (MPI_Alltoallw with a type per peer), blocking and
    # nonblocking, with and without the request matrix; rounds with the limit set. At
    # 3 ranks some ranks' own counts fit int while a peer's do not: every rank must
    # still take the same call (blocking, where a mismatch hangs). About 7.5 GiB at
    # once: skipped, saying so, where the memory is not there.
    available_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    if [ "${available_kib:-0}" -ge $((11 * 1024 * 1024)) ]; then
        run_case "$mpi" 2 "large_count_test-np2" MDL_NODE_LOCAL=off -- "$bin/large_count_test"
        run_case "$mpi" 2 "large_count_test-np2-yield-no-matrix" MDL_NODE_LOCAL=off MDL_WAIT=yield \
            MDL_MATRIX_MAX_RANKS=0 -- "$bin/large_count_test"
        run_case "$mpi" 2 "large_count_test-np2-maxmsg-int" MDL_NODE_LOCAL=off MDL_MAX_MESSAGE_BYTES=2147483647 -- \
            "$bin/large_count_test" --expect-rounds
        run_case "$mpi" 3 "large_count_test-np3-gather-spin" MDL_NODE_LOCAL=off MDL_WAIT=spin -- \
            "$bin/large_count_test" --gather
        run_case "$mpi" 3 "large_count_test-np3-scatter-no-matrix" MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 -- \
            "$bin/large_count_test" --scatter
        # The per-peer datatypes are made after the step's agreement: one rank's failure
        # must fail the step on every rank (it left the others in MPI_Alltoallw).
        # The ids' exchange (the first commit), and the data's (the third): a failed
        # exchange is not counted as a round (the retry must take exactly one).
        for nth in 1 3; do
            run_case "$mpi" 2 "large_count_test-np2-type-$nth-fails-on-rank1" MDL_NODE_LOCAL=off -- env \
                LD_PRELOAD="$bin/failing_type_commit.so" MDL_SHIM_RANK=1 MDL_SHIM_NTH=$nth "$bin/large_count_test" --first-fetch-fails
        done
    else
        echo "SKIP $mpi/large_count_test: needs 11 GiB of MemAvailable, this machine has $((${available_kib:-0} / 1024)) MiB"
    fi
    # The demo as a smoke test (small), when it has been built.
    if [ -x "$bin/demo" ]; then
        dnp=4
        [ "$mpi" = mpich ] && dnp=2
        run_case "$mpi" "$dnp" "demo-np$dnp-smoke" -- "$bin/demo" --samples 20000 --steps 5 \
            --warmup 1 --batches 16,256
    fi
done

mdl_summary
