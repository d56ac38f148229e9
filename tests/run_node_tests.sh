#!/usr/bin/env bash
# The node-local path across two emulated hosts: two network namespaces joined by a
# veth pair, 2 ranks in each, launched through an ssh stand-in (ip netns exec), so that
# MPI itself sees two nodes (MPI_Comm_split_type) and moves everything between them over
# TCP. tests/run_c_tests.sh covers the same on one machine by splitting MPI's node with
# MDL_NODE_KEY; here MPI's own idea of a node is what the library follows.
#
#   tests/run_node_tests.sh openmpi|mpich|all
#
# Cases (the C programs of tests/c, built here):
#   node_local_test   byte-exact fetches of the node's samples alone and mixed with the
#                     other host's, node-local and remote bytes checked, a sampler epoch
#   errors_test       every bad input on one rank fails on every rank, node-local on
#   replica_test      replica groups: one per host (group_size 0), whose fetches and
#                     sampler epochs must never cross the network, and groups of one
#   no-sharing        Open MPI with only its pt2pt one-sided component cannot allocate
#                     shared windows: the library falls back, agreed, on every rank
#
# Needs root (ip netns); without it every case is reported as SKIP and nothing counted.
# MPICH 4.0.2 over UCX/TCP now and then hangs in MPI_Finalize after a program printed
# its results; such a job passes when its closing line says every check passed, and
# the PASS line says so.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
WHICH=${1:-all}
TIMEOUT=${MDL_TEST_TIMEOUT:-120}
SEED=${MDL_TEST_SEED:-1}
LOGDIR=${MDL_TEST_LOGDIR:-$ROOT/target/test-logs}
BUILDROOT=${MDL_TEST_BUILDDIR:-$ROOT/target/c-tests}
mkdir -p "$LOGDIR"
mdl_select_mpis "$WHICH"

source "$ROOT/tests/emulated_hosts.sh"
trap mdl_hosts_delete EXIT
trap 'exit 130' INT TERM

# build <mpi>: the two test programs, against target/<mpi>/release (as run_c_tests.sh).
build() {
    local mpi=$1 libdir=$ROOT/target/$1/release log=$LOGDIR/$1-hosts-build.log src
    mkdir -p "$BUILDROOT/$mpi"
    : >"$log"
    for src in node_local_test errors_test replica_test progress_test; do
        "mpicc.$mpi" -std=c11 -O2 -g -Wall -Wextra -I"$ROOT/include" -I"$ROOT/tests/c" "$ROOT/tests/c/$src.c" \
            -o "$BUILDROOT/$mpi/$src" -L"$libdir" -lmdloader -Wl,-rpath,"$libdir" -lm >>"$log" 2>&1 || return 1
    done
}

# run_hosts <mpi> <name> <closing line> [--osc COMPONENTS] [--round-robin]
#           [--env VAR=VALUE]... -- <program> [args...]
# --round-robin: ranks alternate between the hosts (0 and 2 on A, 1 and 3 on B), so a
# node's ranks are not adjacent.
run_hosts() {
    local mpi=$1 name=$2 closing=$3 osc="sm,pt2pt" rc round_robin=0 envs=(MDL_NODE_LOCAL=on) e
    shift 3
    while [ "$1" != -- ]; do
        case $1 in
        --osc) osc=$2; shift 2 ;;
        --round-robin) round_robin=1; shift ;;
        --env) envs+=("$2"); shift 2 ;;
        *) echo "run_hosts: unknown option $1" >&2; return 2 ;;
        esac
    done
    shift # --
    local log=$LOGDIR/$mpi-hosts-$name.log passed=()
    if [ "$mpi" = openmpi ]; then
        for e in "${envs[@]}"; do passed+=(-x "$e"); done
        mdl_hosts_openmpi "$osc" "${passed[@]}"
        [ $round_robin = 1 ] && MDL_HOSTS_LAUNCH+=(--map-by node)
    else
        for e in "${envs[@]}"; do passed+=(-genv "${e%%=*}" "${e#*=}"); done
        mdl_hosts_mpich "${passed[@]}"
        [ $round_robin = 1 ] && MDL_HOSTS_LAUNCH+=(-ppn 1)
    fi
    echo "+ ip netns exec $MDL_HOST_A ${MDL_HOSTS_LAUNCH[*]} $*" >"$log"
    local start=$SECONDS
    (cd "$ROOT" && export "${envs[@]}" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout -k 10 "$TIMEOUT" ip netns exec "$MDL_HOST_A" "${MDL_HOSTS_LAUNCH[@]}" "$@") >>"$log" 2>&1 </dev/null
    rc=$?
    MDL_ELAPSED=$((SECONDS - start))
    echo "+ exit $rc after $MDL_ELAPSED s" >>"$log"
    if [ "$mpi" = mpich ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && grep -qx "$closing" "$log"; then
        pass "$mpi/hosts-$name (all checks passed; MPICH then hung in MPI_Finalize, a known UCX/TCP issue)"
        return
    fi
    mdl_verdict "$mpi/hosts-$name" $rc "$log"
}

if [ "$(id -u)" != 0 ] || ! mdl_hosts_create node 10.78.0 "$LOGDIR/nsexec-$$.sh" 2>"$LOGDIR/node-hosts.err"; then
    echo "SKIP two emulated hosts: cannot create network namespaces ($(head -c 200 "$LOGDIR/node-hosts.err" 2>/dev/null))"
    mdl_summary
    exit 0
fi

for mpi in "${MPIS[@]}"; do
    bin=$BUILDROOT/$mpi
    if ! build "$mpi"; then
        fail "$mpi/hosts-build" "$LOGDIR/$mpi-hosts-build.log"
        continue
    fi
    run_hosts "$mpi" node_local_test "node_local_test: all checks passed" -- \
        "$bin/node_local_test" --seed "$SEED"
    run_hosts "$mpi" errors_test "errors_test: [0-9]* passed, 0 failed, [0-9]* skipped" -- \
        "$bin/errors_test" --seed "$SEED"
    run_hosts "$mpi" replica_test-per-node "replica_test (group_size 0, 4 ranks): all checks passed" -- \
        "$bin/replica_test" 0 --seed "$SEED"
    run_hosts "$mpi" replica_test-group1 "replica_test (group_size 1, 4 ranks): all checks passed" -- \
        "$bin/replica_test" 1 --seed "$SEED"
    # The node index's leaders exchange their nodes' lengths in rounds (here several:
    # MDL_MAX_MESSAGE_BYTES bounds them), each node's ranks not adjacent.
    run_hosts "$mpi" node_local_test-round-robin-maxmsg4096 "node_local_test: all checks passed" --round-robin \
        --env MDL_MAX_MESSAGE_BYTES=4096 -- "$bin/node_local_test" --seed "$SEED" --iters 20
    # The last rank (host B) gets from rank 0 (host A), which then waits outside MPI:
    # without MPI_THREAD_MULTIPLE (Open MPI's osc pt2pt refuses it) no progress thread
    # serves the get, and the step's closing barrier must.
    run_hosts "$mpi" progress-funneled "progress_test: rank 0 waited .* all checks passed" -- \
        "$bin/progress_test" --funneled --give-up 60
    if [ "$mpi" = openmpi ]; then
        run_hosts "$mpi" no-sharing "node_local_test: all checks passed" --osc pt2pt -- \
            "$bin/node_local_test" --seed "$SEED" --iters 20 --no-sharing
    fi
done

mdl_summary
