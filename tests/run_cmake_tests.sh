#!/usr/bin/env bash
# Tests the CMake package as a user sees it: configure, build and install the top-level
# project for an MPI into a temporary prefix, then build and run against that prefix the
# consumer project c_examples/ (find_package(MDLoader)), the consumers of
# c_examples/readme/ that docs/c-and-fortran.md shows (its C program built by its
# pkg-config line and, as C++, by its CXX-only CMake project; its Fortran program by its
# hand-built line and its Fortran-only CMake project; the lines are by-hand.txt's; all
# run without LD_LIBRARY_PATH), the Fortran module's
# 1-based messages (tests/fortran/messages_test.f90), a C + Fortran consumer, the
# version check, and the configure-time error for a consumer that found another MPI.
#
#   tests/run_cmake_tests.sh openmpi|mpich|all
#
# Prints one line per case, "PASS name" or "FAIL name" (and "SKIP ..." lines that do not
# count), and as the very last line "N passed, M failed". Exit status is non-zero if
# anything failed. Each case's output goes to target/test-logs/cmake-<mpi>-<case>.log and
# its tail is printed when it fails.
#
# Everything stays under target/: build directories cmake-<mpi>, cmake-examples-<mpi>,
# ...; the install prefix target/cmake-prefix-<mpi> is emptied before each install. Each
# configure starts from an empty cache, while cargo's and make's own outputs are reused
# (a fixed prefix path also keeps the examples from recompiling on every run).
#
# Knobs (environment):
#   MDL_SKIP_TORCH=1     do not install torch nor build/run torch_example
#   MDL_TEST_TIMEOUT     seconds per MPI run (default 300); a hung run is killed and FAILs
#   MDL_BUILD_TIMEOUT    seconds per configure/build step (default 3600)
#   MDL_CMAKE_CLEAN=1    delete the build directories first (a cold cargo build)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
WHICH=${1:-all}
TIMEOUT=${MDL_TEST_TIMEOUT:-300}
BUILD_TIMEOUT=${MDL_BUILD_TIMEOUT:-3600}
LOGDIR=$ROOT/target/test-logs
mkdir -p "$LOGDIR"

mdl_select_mpis "$WHICH"

# CMake arguments that make FindMPI pick the given MPI.
mpi_cmake_args() {
    case $1 in
    openmpi) echo "-DMPI_C_COMPILER=mpicc.openmpi -DMPI_CXX_COMPILER=mpicxx.openmpi -DMPI_Fortran_COMPILER=mpif90.openmpi -DMPIEXEC_EXECUTABLE=/usr/bin/mpirun.openmpi" ;;
    mpich) echo "-DMPI_C_COMPILER=mpicc.mpich -DMPI_CXX_COMPILER=mpicxx.mpich -DMPI_Fortran_COMPILER=mpif90.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich" ;;
    esac
}

# step <name> <log> <command...>: runs a configure/build step, logged and timed; PASS/FAIL.
step() {
    local name=$1 log=$2
    shift 2
    local start=$SECONDS rc
    echo "+ $*" >"$log"
    timeout -k 10 "$BUILD_TIMEOUT" "$@" >>"$log" 2>&1
    rc=$?
    echo "+ exit $rc after $((SECONDS - start)) s" >>"$log"
    if [ $rc -eq 0 ]; then
        pass "$name ($((SECONDS - start)) s)"
        return 0
    fi
    fail "$name (exit $rc)" "$log"
    return 1
}

# fresh <build>: the next configure starts from an empty cache (build outputs stay).
fresh() {
    rm -f "$1/CMakeCache.txt"
}

# run_mpi <mpi> <np> <name> <program> [args...]
run_mpi() {
    local mpi=$1 np=$2 name=$3 rc
    shift 3
    local log=$LOGDIR/cmake-$mpi-$name.log
    mdl_mpirun "$mpi" "$np" "$log" -- "$@"
    rc=$?
    mdl_verdict "$mpi/$name" $rc "$log"
}

# The consumers docs/c-and-fortran.md shows, and the command lines that build them by hand.
READMEX=$ROOT/c_examples/readme

# by_hand_line <name>: the command line by-hand.txt names <name>.
by_hand_line() {
    sed -n "s/^$1: //p" "$READMEX/by-hand.txt"
}

# by_hand <mpi> <name> <dir> <line>: runs a command line of c_examples/readme/by-hand.txt
# as written (PASS/FAIL), in dir, with the installed package on PKG_CONFIG_PATH and no
# LD_LIBRARY_PATH. The file names Open MPI's compilers; MPICH's are the .mpich ones.
by_hand() {
    local mpi=$1 name=$2 dir=$3 line=$4 log=$LOGDIR/cmake-$1-$2.log
    {
        [ -n "$line" ] || echo "c_examples/readme/by-hand.txt lacks the line of $name"
        [ "$mpi" = mpich ] && line=$(echo "$line" | sed 's/^mpicc /mpicc.mpich /; s/^mpif90 /mpif90.mpich /')
        echo "+ (cd $dir && $line)"
        (cd "$dir" && env -u LD_LIBRARY_PATH PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
            timeout -k 10 "$BUILD_TIMEOUT" bash -c "$line")
    } >"$log" 2>&1 && ! grep -q "^c_examples/readme/by-hand.txt lacks" "$log" && pass "$mpi/$name" && return 0
    fail "$mpi/$name" "$log"
    return 1
}

# readme_run <mpi> <np> <name> <program>: runs a consumer built from c_examples/readme/
# on np ranks with no LD_LIBRARY_PATH (the rpath must find the library); every rank must
# print the program's line about the job's last sample (3 bytes).
readme_run() {
    local mpi=$1 np=$2 name=$3 log=$LOGDIR/cmake-$1-$3.log rc
    shift 3
    mdl_mpirun "$mpi" "$np" "$log" LD_LIBRARY_PATH= -- "$@"
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c ': sample [0-9]* has 3 bytes$' "$log")" -ne "$np" ]; then
        echo "+ expected $np lines 'rank r: sample N has 3 bytes'" >>"$log"
        rc=1
    fi
    mdl_verdict "$mpi/$name" $rc "$log"
}

# ------------------------------------------------------------------------------- torch
TORCH=1
if [ "${MDL_SKIP_TORCH:-0}" = 1 ]; then
    TORCH=0
    echo "SKIP torch_example (MDL_SKIP_TORCH=1)"
else
    # One shared copy of the PyPI wheel (CUDA build; it runs on the CPU), linked into
    # .venv; only its C++ headers and libraries are used here. See scripts/install-torch.sh.
    log=$LOGDIR/cmake-torch-install.log
    mkdir -p "$LOGDIR"
    start=$SECONDS
    { [ -x "$ROOT/.venv/bin/python" ] || python3 -m venv "$ROOT/.venv"; } >"$log" 2>&1
    timeout -k 10 "$BUILD_TIMEOUT" "$ROOT/scripts/install-torch.sh" "$ROOT/.venv" >>"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        pass "torch-install ($((SECONDS - start)) s)"
    elif [ $rc -eq 3 ]; then
        TORCH=0
        echo "SKIP torch_example: this machine's disk cannot hold torch, torch_example does NOT run"
        sed 's/^/    /' "$log"
    else
        TORCH=0
        fail "torch-install (exit $rc)" "$log"
    fi
fi
TORCH_ARGS=(-DMDL_WITH_TORCH=OFF)
if [ $TORCH = 1 ]; then
    TORCH_ARGS=(-DMDL_WITH_TORCH=ON)
fi

# ---------------------------------------------------------------------------- per MPI
for mpi in "${MPIS[@]}"; do
    if ! command -v "mpicc.$mpi" >/dev/null; then
        fail "$mpi/configure (mpicc.$mpi not found)"
        continue
    fi
    build=$ROOT/target/cmake-$mpi
    examples=$ROOT/target/cmake-examples-$mpi
    if [ "${MDL_CMAKE_CLEAN:-0}" = 1 ]; then
        rm -rf "$build" "$examples"
    fi
    prefix=$ROOT/target/cmake-prefix-$mpi
    rm -rf "$prefix"
    # shellcheck disable=SC2046 # word splitting of the MPI arguments is intended
    mpiargs=($(mpi_cmake_args "$mpi"))
    # Open MPI is the system default: configure it without hints, as a user would.
    [ "$mpi" = openmpi ] && mpiargs=()

    # -- the package
    fresh "$build"
    step "$mpi/configure" "$LOGDIR/cmake-$mpi-configure.log" \
        cmake -S "$ROOT" -B "$build" -DCMAKE_INSTALL_PREFIX="$prefix" "${mpiargs[@]}" || continue
    step "$mpi/build" "$LOGDIR/cmake-$mpi-build.log" cmake --build "$build" -j2 || continue
    step "$mpi/install" "$LOGDIR/cmake-$mpi-install.log" cmake --install "$build" || continue

    # -- what was installed
    log=$LOGDIR/cmake-$mpi-install-layout.log
    version=$(sed -n 's/^version = "\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -n1)
    major=${version%%.*}
    fortran=0
    grep -q "^set(_mdl_has_fortran TRUE)" "$prefix/lib/cmake/MDLoader/MDLoaderConfig.cmake" 2>/dev/null && fortran=1
    {
        ok=0
        for f in "lib/libmdloader.so.$version" include/mdloader.h lib/cmake/MDLoader/MDLoaderConfig.cmake \
            lib/cmake/MDLoader/MDLoaderConfigVersion.cmake lib/pkgconfig/mdloader.pc; do
            [ -f "$prefix/$f" ] && echo "ok   $f" || { echo "MISSING $f"; ok=1; }
        done
        [ "$(readlink "$prefix/lib/libmdloader.so.$major")" = "libmdloader.so.$version" ] &&
            echo "ok   libmdloader.so.$major -> libmdloader.so.$version" || { echo "BAD link libmdloader.so.$major"; ok=1; }
        [ "$(readlink "$prefix/lib/libmdloader.so")" = "libmdloader.so.$major" ] &&
            echo "ok   libmdloader.so -> libmdloader.so.$major" || { echo "BAD link libmdloader.so"; ok=1; }
        soname=$(readelf -d "$prefix/lib/libmdloader.so.$version" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
        [ "$soname" = "libmdloader.so.$major" ] && echo "ok   SONAME $soname" || { echo "BAD SONAME '$soname'"; ok=1; }
        if [ $fortran = 1 ]; then
            [ -f "$prefix/include/mdloader/mdloader.mod" ] && echo "ok   include/mdloader/mdloader.mod" ||
                { echo "MISSING include/mdloader/mdloader.mod"; ok=1; }
            ls "$prefix"/lib/libmdloader_f.so* >/dev/null 2>&1 && echo "ok   lib/libmdloader_f.so*" ||
                { echo "MISSING lib/libmdloader_f.so"; ok=1; }
        else
            echo "(no Fortran module in this installation)"
        fi
        pcversion=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion mdloader)
        [ "$pcversion" = "$version" ] && echo "ok   pkg-config --modversion $pcversion" ||
            { echo "BAD pkg-config --modversion '$pcversion'"; ok=1; }
        ldd "$prefix/lib/libmdloader.so.$version" | grep -E "libmpi" || true
        (exit $ok)
    } >"$log" 2>&1 && pass "$mpi/install-layout" || fail "$mpi/install-layout" "$log"

    # -- the consumer project
    fresh "$examples"
    step "$mpi/examples-configure" "$LOGDIR/cmake-$mpi-examples-configure.log" \
        cmake -S "$ROOT/c_examples" -B "$examples" -DCMAKE_PREFIX_PATH="$prefix" "${mpiargs[@]}" \
        "${TORCH_ARGS[@]}" || continue
    step "$mpi/examples-build" "$LOGDIR/cmake-$mpi-examples-build.log" cmake --build "$examples" -j2 || continue

    nps=(2 4)
    [ "$mpi" = mpich ] && nps=(2) # MPICH busy-polls when ranks outnumber the 2 cores
    for np in "${nps[@]}"; do
        run_mpi "$mpi" "$np" "c_example-np$np" "$examples/c_example"
    done
    if [ $TORCH = 1 ]; then
        if [ -x "$examples/torch_example" ]; then
            for np in "${nps[@]}"; do
                run_mpi "$mpi" "$np" "torch_example-np$np" "$examples/torch_example" --epochs 5
            done
        else
            fail "$mpi/torch_example (not built: see $LOGDIR/cmake-$mpi-examples-configure.log)"
        fi
    fi
    run_mpi "$mpi" 2 "demo-np2-smoke" "$examples/demo" --samples 20000 --steps 5 --warmup 1 --batches 16,256

    # -- the consumers of c_examples/readme/ (docs/c-and-fortran.md): the C program with
    # pkg-config, the same program compiled as C++ by the CXX-only CMake project, the
    # Fortran program by its hand-built line and by the Fortran-only CMake project, each
    # run on 2 ranks.
    rsrc=$ROOT/target/cmake-readme-$mpi
    rm -rf "$rsrc"
    mkdir -p "$rsrc/c" "$rsrc/cxx" "$rsrc/fortran" "$rsrc/fortran-cmake"
    cp "$READMEX/app.c" "$rsrc/c/app.c"
    cp "$READMEX/app.c" "$rsrc/cxx/app.cpp"
    cp "$READMEX/cxx/CMakeLists.txt" "$rsrc/cxx/CMakeLists.txt"
    cp "$READMEX/sim.f90" "$rsrc/fortran/sim.f90"
    cp "$READMEX/sim.f90" "$rsrc/fortran-cmake/sim.f90"
    cp "$READMEX/fortran/CMakeLists.txt" "$rsrc/fortran-cmake/CMakeLists.txt"
    pc_line=$(by_hand_line pkgconfig)
    f_line=$(by_hand_line fortran)
    if by_hand "$mpi" readme-pkgconfig-build "$rsrc/c" "$pc_line"; then
        readme_run "$mpi" 2 readme-pkgconfig-np2 "$rsrc/c/a.out"
    fi
    kinds=(cxx)
    if [ $fortran = 1 ]; then
        kinds+=(fortran-cmake)
        if by_hand "$mpi" readme-fortran-by-hand-build "$rsrc/fortran" "$f_line"; then
            readme_run "$mpi" 2 readme-fortran-by-hand-np2 "$rsrc/fortran/a.out"
        fi
        # The Fortran module's messages count from 1, built by the same line.
        mkdir -p "$rsrc/messages"
        cp "$ROOT/tests/fortran/messages_test.f90" "$rsrc/messages/sim.f90"
        if by_hand "$mpi" fortran-messages-build "$rsrc/messages" "$f_line"; then
            run_mpi "$mpi" 2 fortran-messages-np2 "$rsrc/messages/a.out"
        fi
    else
        echo "SKIP $mpi/readme-fortran-* (no Fortran module installed)"
    fi
    for kind in "${kinds[@]}"; do
        if step "$mpi/readme-$kind-configure" "$LOGDIR/cmake-$mpi-readme-$kind-configure.log" \
            cmake -S "$rsrc/$kind" -B "$rsrc/$kind/build" -DCMAKE_PREFIX_PATH="$prefix" "${mpiargs[@]}" &&
            step "$mpi/readme-$kind-build" "$LOGDIR/cmake-$mpi-readme-$kind-build.log" \
                cmake --build "$rsrc/$kind/build" -j2; then
            exe=app
            [ $kind = fortran-cmake ] && exe=sim
            readme_run "$mpi" 2 "readme-$kind-np2" "$rsrc/$kind/build/$exe"
        fi
    done

    # -- a Fortran consumer: find_package(MDLoader COMPONENTS fortran), use mdloader
    if [ $fortran = 1 ]; then
        fsrc=$ROOT/target/cmake-fortran-consumer-src
        fbuild=$ROOT/target/cmake-fortran-consumer-$mpi
        mkdir -p "$fsrc"
        cat >"$fsrc/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(fortran_consumer C Fortran)
find_package(MDLoader 0.1 REQUIRED COMPONENTS fortran)
add_executable(fortran_consumer main.f90)
target_link_libraries(fortran_consumer PRIVATE MDLoader::fortran)
EOF
        cat >"$fsrc/main.f90" <<'EOF'
program fortran_consumer
   use mpi
   use mdloader
   implicit none
   type(mdl_loader) :: ld
   integer :: ierr, rank
   call MPI_Init(ierr)
   call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
   call mdl_init(ld, MPI_COMM_WORLD, ierr)
   if (ierr /= MDL_OK) error stop 'mdl_init failed'
   call mdl_finalize(ld, ierr)
   if (ierr /= MDL_OK) error stop 'mdl_finalize failed'
   if (rank == 0) print '(a)', 'fortran consumer: init and finalize OK'
   call MPI_Finalize(ierr)
end program fortran_consumer
EOF
        fresh "$fbuild"
        if step "$mpi/fortran-consumer-configure" "$LOGDIR/cmake-$mpi-fortran-consumer-configure.log" \
            cmake -S "$fsrc" -B "$fbuild" -DCMAKE_PREFIX_PATH="$prefix" "${mpiargs[@]}" &&
            step "$mpi/fortran-consumer-build" "$LOGDIR/cmake-$mpi-fortran-consumer-build.log" \
                cmake --build "$fbuild" -j2; then
            run_mpi "$mpi" 2 "fortran-consumer-np2" "$fbuild/fortran_consumer"
        fi
    else
        echo "SKIP $mpi/fortran-consumer (no Fortran module installed)"
    fi

    # -- the version file: 0.1.x does not satisfy a request for 0.2
    vsrc=$ROOT/target/cmake-version-check-src
    mkdir -p "$vsrc"
    cat >"$vsrc/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(version_check C)
find_package(MDLoader ${WANT} REQUIRED)
EOF
    log=$LOGDIR/cmake-$mpi-version-check.log
    bad=$(echo "$version" | awk -F. '{print $1 "." $2 + 1}')
    {
        vbuild=$ROOT/target/cmake-version-check-$mpi
        echo "+ find_package(MDLoader $bad) must fail"
        fresh "$vbuild"
        cmake -S "$vsrc" -B "$vbuild" -DWANT="$bad" -DCMAKE_PREFIX_PATH="$prefix" "${mpiargs[@]}"
        rc_bad=$?
        echo "+ find_package(MDLoader $version) must work"
        fresh "$vbuild"
        cmake -S "$vsrc" -B "$vbuild" -DWANT="$version" -DCMAKE_PREFIX_PATH="$prefix" "${mpiargs[@]}"
        rc_good=$?
        echo "+ exits: $bad -> $rc_bad, $version -> $rc_good"
        [ $rc_bad -ne 0 ] && [ $rc_good -eq 0 ]
    } >"$log" 2>&1 && pass "$mpi/version-check" || fail "$mpi/version-check" "$log"

    # -- the other MPI's compilers against this installation: a clear configure error
    other=mpich
    [ "$mpi" = mpich ] && other=openmpi
    log=$LOGDIR/cmake-$mpi-mpi-mismatch.log
    if command -v "mpicc.$other" >/dev/null; then
        {
            echo "+ c_examples for an MDLoader built with $mpi, configured with $other's compilers: must fail"
            fresh "$ROOT/target/cmake-mismatch-$mpi"
            # shellcheck disable=SC2046
            cmake -S "$ROOT/c_examples" -B "$ROOT/target/cmake-mismatch-$mpi" -DCMAKE_PREFIX_PATH="$prefix" \
                $(mpi_cmake_args "$other") -DMDL_WITH_TORCH=OFF
            rc=$?
            echo "+ exit $rc"
            [ $rc -ne 0 ] && grep -q "MDLoader MPI mismatch" "$log"
        } >"$log" 2>&1 && pass "$mpi/mpi-mismatch-error" || fail "$mpi/mpi-mismatch-error" "$log"
    else
        echo "SKIP $mpi/mpi-mismatch-error (mpicc.$other not found)"
    fi
done

mdl_summary
