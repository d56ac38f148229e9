# Shared by the test runners (tests/run_*_tests.sh): which MPI families to test, the
# PASS/FAIL bookkeeping, and the closing "N passed, M failed" line.
#
#   source "$ROOT/tests/lib.sh"
#   mdl_select_mpis "$1"        # sets MPIS from openmpi|mpich|all, or exits with usage
#   pass NAME;  fail NAME [LOG]   # one line per case; a failing case's log is shown
#   mdl_summary                 # the closing line; returns non-zero if anything failed

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

mdl_summary() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}
