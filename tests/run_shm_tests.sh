#!/usr/bin/env bash
# A container's small /dev/shm: each case runs a 2-rank job in a private mount namespace
# (unshare -m) whose /dev/shm is a 64 MiB tmpfs, with the store's shards or its index
# just below and just above what that file system can hold. Below, the shards stay in
# shared memory (node-local copies); above, every rank keeps them (and, for the index
# cases, the index) in private memory, with one warning; never a SIGBUS or a hang, and
# every fetched byte right (tests/c/shm_test.c).
#
#   tests/run_shm_tests.sh openmpi|mpich|all
#
# Needs root (mount namespaces); otherwise it says SKIP. Needs the library built
# (scripts/build.sh <mpi>).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/tests/lib.sh"
TIMEOUT=${MDL_TEST_TIMEOUT:-300}
LOGDIR=${MDL_TEST_LOGDIR:-$ROOT/target/test-logs}
BUILDROOT=${MDL_TEST_BUILDDIR:-$ROOT/target/c-tests}
mkdir -p "$LOGDIR"
mdl_select_mpis "${1:-all}"

SHM_MIB=64
MIB=$((1 << 20))

if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "SKIP small /dev/shm: mount namespaces need root (unshare -m)"
    mdl_summary
    exit 0
fi

# shm_case <mpi> <name> "<sizes>" <expect shared|private|alone> <index: shared|private>
#          [VAR=value ...]
# sizes: shm_test's options, "--samples N --bytes B" or "--shards-vs-room D" or
# "--index-vs-room D" (D MiB from the room the library will find: shm_test measures
# it after MPI_Init, as each MPI takes some of the tmpfs there).
# (alone: one rank, nothing to share, nothing to warn of; set NP=1.)
shm_case() {
    local mpi=$1 name=$2 sizes=$3 expect=$4 index=$5 np=${NP:-2}
    shift 5
    local log=$LOGDIR/$mpi-shm-$name.log launcher envs=("$@") e
    if [ "$mpi" = openmpi ]; then
        launcher="mpirun.openmpi -n $np"
        for e in "${envs[@]}"; do launcher+=" -x $e"; done
    else
        launcher="mpiexec.mpich -n $np"
        for e in "${envs[@]}"; do launcher+=" -genv ${e%%=*} ${e#*=}"; done
    fi
    local job="mount -t tmpfs -o size=${SHM_MIB}m tmpfs /dev/shm && $launcher $BUILDROOT/$mpi/shm_test \
$sizes --expect $expect"
    echo "+ unshare -m sh -c '$job'" >"$log"
    local start=$SECONDS rc
    (cd "$ROOT" && env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "${envs[@]}" \
        timeout -k 10 "$TIMEOUT" unshare -m sh -c "$job") >>"$log" 2>&1 </dev/null
    rc=$?
    MDL_ELAPSED=$((SECONDS - start))
    echo "+ exit $rc after $MDL_ELAPSED s" >>"$log"
    local warned
    warned=$(grep -c 'WARN.*shared memory: /dev/shm has' "$log")
    if [ "$rc" -eq 0 ]; then
        # One warning (from the node's leader) exactly where something fell back, and
        # it names the index exactly where the index did.
        if [ "$expect" != private ] && [ "$warned" -ne 0 ]; then
            fail "$mpi/shm-$name (a warning where everything fit)" "$log"
            return
        fi
        if [ "$expect" = private ] && [ "$warned" -ne 1 ]; then
            fail "$mpi/shm-$name ($warned warnings, expected 1)" "$log"
            return
        fi
        if [ "$index" = private ] && ! grep -q 'the shards and the index are kept' "$log"; then
            fail "$mpi/shm-$name (the index did not fall back)" "$log"
            return
        fi
        if [ "$index" = shared ] && grep -q 'the shards and the index are kept' "$log"; then
            fail "$mpi/shm-$name (the index fell back where it fit)" "$log"
            return
        fi
    fi
    mdl_verdict "$mpi/shm-$name" $rc "$log"
}

# space_case <mpi> <name> <shm_test options> <expect> [VAR=value ...]: a 2-rank job
# whose last rank runs under an address-space limit (shm_test --space-after-shard),
# outside any mount namespace; one warning from that rank where the shards fell back.
space_case() {
    local mpi=$1 name=$2 options=$3 expect=$4
    shift 4
    local log=$LOGDIR/$mpi-shm-$name.log rc warned
    # shellcheck disable=SC2086 # the options are words
    mdl_mpirun "$mpi" 2 "$log" "$@" -- "$BUILDROOT/$mpi/shm_test" $options --expect "$expect"
    rc=$?
    warned=$(grep -c 'WARN.*address space: this process may map' "$log")
    if [ "$rc" -eq 0 ] && [ "$warned" -ne "$([ "$expect" = private ] && echo 1 || echo 0)" ]; then
        fail "$mpi/shm-$name ($warned address-space warnings where the shards stayed $expect)" "$log"
        return
    fi
    mdl_verdict "$mpi/shm-$name" $rc "$log"
}

# mpi_cannot_share_case <name> <np> <lengths: same|varying> [<nodes: one|two>]: Open MPI
# with only its pt2pt one-sided component, which makes no shared-memory windows
# (MPI_Win_allocate_shared fails on every rank): every rank keeps its shard (and the
# index, where samples vary in length and there is one) private, and the job says so
# once for each, not once per rank (at 2048 ranks, 4096 identical lines), nor again for
# calibration's scratch store (which runs only where the job spans nodes: two nodes
# emulated with tests/node_key.sh).
mpi_cannot_share_case() {
    local name=$1 np=$2 lengths=$3 nodes=${4:-one} log=$LOGDIR/openmpi-shm-$1.log rc index_lines shard_lines
    local want_index=0 varying=() launch=()
    if [ "$lengths" = varying ]; then
        want_index=1
        varying=(--varying 1)
    fi
    [ "$nodes" = two ] && launch=("$ROOT/tests/node_key.sh")
    mdl_mpirun openmpi "$np" "$log" OMPI_MCA_osc=pt2pt -- "${launch[@]}" "$BUILDROOT/openmpi/shm_test" --samples 4096 \
        --bytes 256 "${varying[@]}" --expect private
    rc=$?
    index_lines=$(grep -c 'WARN.*the index cannot be shared within nodes' "$log")
    shard_lines=$(grep -c 'WARN.*the shards cannot be shared within nodes' "$log")
    if [ "$rc" -eq 0 ] && { [ "$index_lines" -ne "$want_index" ] || [ "$shard_lines" -ne 1 ]; }; then
        fail "openmpi/shm-$name ($index_lines index and $shard_lines shard warnings, expected $want_index and 1)" "$log"
        return
    fi
    mdl_verdict "openmpi/shm-$name" $rc "$log"
}

# late_window_case <mpi>: 2 ranks, MDL_TIMEOUT=2, rank 1 back from its first
# MPI_Win_allocate_shared 6 s late (tests/c/shims/late_shared_window.c). Rank 0 times
# out waiting for it; rank 1 must then time out in the agreement on the window, not
# take that for a fallback into MPI_Win_allocate, where it hung for ever.
late_window_case() {
    local mpi=$1 log=$LOGDIR/$1-shm-late-window.log rc reported
    mdl_mpirun "$mpi" 2 "$log" MDL_TIMEOUT=2 -- env LD_PRELOAD="$BUILDROOT/$mpi/late_shared_window.so" MDL_SHIM_RANK=1 \
        MDL_SHIM_SLEEP=6 "$BUILDROOT/$mpi/shm_test" --samples 4096 --bytes 256 --expect timeout
    rc=$?
    reported=$(grep -c 'mdl_register_shard returned a collective call timed out' "$log")
    if [ "$reported" -ne 2 ]; then
        fail "$mpi/shm-late-window ($reported of 2 ranks returned MDL_ERR_TIMEOUT; exit $rc)" "$log"
        return
    fi
    mdl_verdict "$mpi/shm-late-window" 0 "$log"
}

build() {
    local mpi=$1 libdir=$ROOT/target/$1/release log=$LOGDIR/$1-shm-build.log
    mkdir -p "$BUILDROOT/$mpi"
    "mpicc.$mpi" -std=c11 -O2 -g -Wall -Wextra -Werror -I"$ROOT/include" -I"$ROOT/tests/c" "$ROOT/tests/c/shm_test.c" \
        -o "$BUILDROOT/$mpi/shm_test" -L"$libdir" -lmdloader -Wl,-rpath,"$libdir" -lm >"$log" 2>&1 &&
        "mpicc.$mpi" -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC "$ROOT/tests/c/shims/late_shared_window.c" \
            -o "$BUILDROOT/$mpi/late_shared_window.so" >>"$log" 2>&1
}

for mpi in "${MPIS[@]}"; do
    if ! build "$mpi"; then
        fail "$mpi/shm-build" "$LOGDIR/$mpi-shm-build.log"
        continue
    fi
    shm_case "$mpi" shards-below "--shards-vs-room -4" shared shared
    # 1 MiB below: calibration's scratch store (registered after the shards) must not
    # be checked again, fall back alone, or warn.
    shm_case "$mpi" shards-just-below "--shards-vs-room -1" shared shared
    # One rank: MPI keeps a lone rank's window in private memory, so a shard beyond the
    # tmpfs needs no fallback (Open MPI's MPI_Win_create, the fallback, fails on one rank).
    NP=1 shm_case "$mpi" one-rank-beyond-tmpfs "--samples $(((SHM_MIB + 4) * MIB / 4096)) --bytes 4096" alone shared
    shm_case "$mpi" shards-above "--shards-vs-room 4" private shared
    # Beyond the tmpfs itself (4 MiB over 64): without the check MPICH died of SIGBUS
    # here and Open MPI hung.
    shm_case "$mpi" shards-beyond-tmpfs "--samples $(((SHM_MIB + 4) * MIB / 2 / 4096)) --bytes 4096" private shared
    # The plain window (MPI_Win_allocate) is in shared memory too, on both MPIs.
    shm_case "$mpi" shards-above-node-local-off "--shards-vs-room 4" private shared MDL_NODE_LOCAL=off
    # The index: 1 byte a sample of the job (64 starts a 64-byte line), with 1-byte
    # samples (and one 2-byte sample per rank: samples of one length need no index).
    shm_case "$mpi" index-below "--index-vs-room -4" shared shared
    shm_case "$mpi" index-above "--index-vs-room 4" private private
    shm_case "$mpi" index-beyond-tmpfs "--samples $(((SHM_MIB + 4) * MIB / 2)) --bytes 1 --varying 1" private private
done

# An address-space limit (ulimit -v) on one rank that holds its own shard of 128 MiB
# but not the node's 256 MiB, which MPICH and the node-local path map into every
# process: without the check that rank failed alone in MPI_Win_allocate and the other
# waited there for ever. With 512 MiB to spare everything stays shared.
for mpi in "${MPIS[@]}"; do
    [ -x "$BUILDROOT/$mpi/shm_test" ] || continue
    for local in on off; do
        space_case "$mpi" address-space-short-node-local-$local "--samples 32768 --bytes 4096 --space-after-shard 64" \
            private MDL_NODE_LOCAL=$local
    done
    # Just above the node's windows (256 MiB) by 5 MiB: MPICH maps about 6 MiB more as it
    # makes them, and hung here until MDL_SHM_RESERVE was kept free of the limit too.
    space_case "$mpi" address-space-just-short "--samples 32768 --bytes 4096 --space-after-shard 133" private
    space_case "$mpi" address-space-enough "--samples 32768 --bytes 4096 --space-after-shard 512" shared
done

for mpi in "${MPIS[@]}"; do
    [ -x "$BUILDROOT/$mpi/shm_test" ] && late_window_case "$mpi"
done

if [[ " ${MPIS[*]} " == *" openmpi "* ]] && [ -x "$BUILDROOT/openmpi/shm_test" ]; then
    mpi_cannot_share_case mpi-cannot-share-np2 2 same
    mpi_cannot_share_case mpi-cannot-share-np4 4 same
    mpi_cannot_share_case mpi-cannot-share-varying-np4 4 varying
    mpi_cannot_share_case mpi-cannot-share-two-nodes-np4 4 varying two
    mpi_cannot_share_case mpi-cannot-share-two-nodes-same-np4 4 same two
fi

mdl_summary
