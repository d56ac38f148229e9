# Shared by the test runners (tests/run_*_tests.sh): which MPI families to test, the
# PASS/FAIL bookkeeping, and the closing "N passed, M failed" line.
#
#   source "$ROOT/tests/lib.sh"
#   mdl_select_mpis "$1"        # sets MPIS from openmpi|mpich|all, or exits with usage
#   pass NAME;  fail NAME [LOG]   # one line per case; a failing case's log is shown
#   mdl_summary                 # the closing line; returns non-zero if anything failed
#   mdl_mpirun MPI NP LOG [VAR=value ...] -- PROGRAM [ARGS...]   # one MPI job, see below
#   mdl_verdict NAME RC LOG     # pass, or fail naming a timeout or the exit status

PASSED=0
FAILED=0

mdl_select_mpis() {
    case ${1:-all} in
    openmpi) MPIS=(openmpi) ;;
    mpich) MPIS=(mpich) ;;
    all) MPIS=(openmpi mpich) ;;
    *)
        echo "usage: $0 openmpi|mpich|all" >&2
        exit 2
        ;;
    esac
}

pass() {
    echo "PASS $1"
    PASSED=$((PASSED + 1))
}

fail() {
    echo "FAIL $1"
    FAILED=$((FAILED + 1))
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        # Indented, so that the test's own "PASS ..." or "N passed" lines cannot be
        # mistaken for this script's results.
        echo "    ----- $2 (last ${MDL_FAIL_LOG_LINES:-150} lines) -----"
        tail -n "${MDL_FAIL_LOG_LINES:-150}" "$2" | sed 's/^/    | /'
        echo "    ----- end of $2 -----"
    fi
}

# Run PROGRAM on NP ranks of MPI (openmpi|mpich) from $ROOT, with the variables set on
# every rank, under `timeout $TIMEOUT`; the command line, start, output and exit status
# go to LOG. Returns the job's exit status (124 or 137: timed out). Sets MDL_ELAPSED.
#
# MDL_TEST_NODE_LOCAL: set by the runners that test the engines themselves (C, scale,
# fuzz) to `off`. The library's default (node-local on) copies every sample of a
# one-node job from shared memory, so on this one machine the engines would move
# nothing; such a runner's case that names MDL_NODE_LOCAL keeps its own value, and
# `MDL_NODE_LOCAL=` (empty) runs the library's default.
mdl_mpirun() {
    local mpi=$1 np=$2 log=$3
    shift 3
    local envs=() launcher=() e
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift # --
    if [ -n "${MDL_TEST_NODE_LOCAL:-}" ] && ! printf '%s\n' "${envs[@]}" | grep -q '^MDL_NODE_LOCAL='; then
        envs=(MDL_NODE_LOCAL="$MDL_TEST_NODE_LOCAL" "${envs[@]}")
    fi
    if [ "$mpi" = openmpi ]; then
        # As root, with more ranks than the 2 cores: allowed explicitly.
        launcher=(mpirun.openmpi --oversubscribe -n "$np")
        for e in "${envs[@]}"; do launcher+=(-x "${e%%=*}"); done
    else
        launcher=(mpiexec.mpich -n "$np")
        for e in "${envs[@]}"; do launcher+=(-genv "${e%%=*}" "${e#*=}"); done
    fi
    {
        echo "+ ${envs[*]} ${launcher[*]} $*"
        echo "+ started $(date -Is)"
    } >"$log"
    local start=$SECONDS rc
    (cd "$ROOT" && env "${envs[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_rmaps_base_oversubscribe=1 \
        timeout -k 10 "$TIMEOUT" "${launcher[@]}" "$@") >>"$log" 2>&1 </dev/null
    rc=$?
    MDL_ELAPSED=$((SECONDS - start))
    echo "+ exit $rc after $MDL_ELAPSED s" >>"$log"
    return $rc
}

# The usual outcome of a job: PASS on exit 0, else FAIL naming the timeout or status.
mdl_verdict() {
    local name=$1 rc=$2 log=$3
    if [ "$rc" -eq 0 ]; then
        pass "$name ($MDL_ELAPSED s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$name (timeout after $TIMEOUT s)" "$log"
    else
        fail "$name (exit $rc)" "$log"
    fi
}

mdl_summary() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}
