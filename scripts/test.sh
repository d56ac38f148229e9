#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs what is missing, builds
# the library for Open MPI and MPICH, and runs every suite. Each suite prints its own
# PASS/FAIL lines; the last line here is the total, "N passed, M failed".
#
#   scripts/test.sh            everything
#   MDL_TEST_MPIS=openmpi scripts/test.sh    one MPI family only
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MPIS=${MDL_TEST_MPIS:-openmpi mpich}
mkdir -p target/test-logs

scripts/install-deps.sh || { echo "installing dependencies failed"; echo "0 passed, 1 failed"; exit 1; }

PASSED=0
FAILED=0
FAILED_SUITES=()

# Add up "N passed, M failed" (our runners) and "test result: ... N passed; M failed"
# (cargo) lines from a suite's output.
tally() {
    local suite=$1 log=$2 rc=$3 p f
    p=$(grep -Eo '(^|result: [a-zA-Z]+\. )[0-9]+ passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
    # Only the runners' own closing lines count: a failing case's log, shown indented,
    # may hold the closing lines of the program it ran.
    f=$(grep -E '^[0-9]+ passed, [0-9]+ failed|^test result:' "$log" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1 # the suite failed before it could count (build error, crash)
    fi
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    [ "$f" -gt 0 ] && FAILED_SUITES+=("$suite")
    echo "== $suite: $p passed, $f failed"
}

# run_suite <name> <command...>: runs it with its output shown and logged.
run_suite() {
    local name=$1
    shift
    local log=$ROOT/target/test-logs/suite-$name.log
    echo "== $name: $*"
    "$@" 2>&1 | tee "$log"
    tally "$name" "$log" "${PIPESTATUS[0]}"
}

# The bench feature adds the benchmark programs' own tests (examples/scale_model).
run_suite unit env MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/openmpi cargo test --quiet --features bench
for mpi in $MPIS; do
    run_suite "build-$mpi" scripts/build.sh "$mpi"
done
# Each suite for each MPI: C tests (tests/run_c_tests.sh), the node-local path across
# two hosts emulated with network namespaces (tests/run_node_tests.sh), the C tests at
# 16-64 ranks (tests/run_scale_tests.sh), a container's small /dev/shm
# (tests/run_shm_tests.sh), the C boundary's fuzzer and
# the C tests under valgrind (tests/run_fuzz_tests.sh), an allocation failed on one
# rank at every point of a job (tests/run_fault_tests.sh), the CMake package and its
# consumers (tests/run_cmake_tests.sh), the Fortran and Python bindings with QM9
# (tests/run_binding_tests.sh).
for suite in c node scale shm fuzz fault cmake binding; do
    for mpi in $MPIS; do
        run_suite "$suite-$mpi" "tests/run_${suite}_tests.sh" "$mpi"
    done
done

[ ${#FAILED_SUITES[@]} -gt 0 ] && echo "failed suites: ${FAILED_SUITES[*]}"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
