#!/usr/bin/env bash
# One simulated run of smpi_client at P ranks under SimGrid's SMPI (README.md):
#   benches/smpi/run.sh <ranks> [samples/rank] [sample bytes] [steps] [batch...]
# Builds what is missing (libsimgrid-dev, the SMPI library, the client), writes the
# platform, runs, and leaves benches/smpi/results/<name>.csv: a header of '#' lines (commit,
# platform, every smpirun setting and MDL_* variable) then the client's CSV.
# Environment: MDL_* variables pass through (MDL_WAIT, MDL_NODE_LOCAL, ...);
# ENGINES limits the engines stepped (smpi_client.c); EPOCH_BATCH (0: no epoch) and
# EPOCH_BACKEND set the client's sampler epoch's batch (default
# the first batch) and engine (default AUTO);
# SMPI_EXTRA adds smpirun options; RESULT names the output (default p<ranks>);
# SMPI_LIB below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
P=${1:?usage: run.sh <ranks> [samples/rank] [sample bytes] [steps] [batch...]}
PER_RANK=${2:-256} SIZE=${3:-1024} STEPS=${4:-5}
shift $(($# < 4 ? $# : 4))
BATCHES=${*:-64}
# SMPI_LIB: another SMPI build of the library (a before/after comparison); default
# this tree's, built when missing.
lib=${SMPI_LIB:-$root/target/smpi/release}
[ -f "$lib/libmdloader.so" ] || "$here/build.sh"
client=$lib/smpi_client
if [ ! -x "$client" ] || [ "$here/smpi_client.c" -nt "$client" ] || [ "$lib/libmdloader.so" -nt "$client" ]; then
    smpicc -O2 -std=c11 -I"$root/include" -I"$root/benches" "$here/smpi_client.c" -o "$client" \
        -L"$lib" -lmdloader -Wl,-rpath,"$lib" -lm
fi
mkdir -p "$here/results"
out=$here/results/${RESULT:-p$P}.csv
work=$(mktemp -d) && trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
platform=$("$here/make_platform.py" "$P" "$work/platform.xml" "$work/hosts")
# Why each setting (README.md, "Settings"): per-rank copies of the library (it has
# statics), MPI_Test without injected sleeps, pinned collective algorithms (SMPI's
# default allgather is a linear nonblocking one finished by a waitall quadratic in P:
# 256 ranks spent 27 CPU minutes in mdl_init's MPI_Allgather), the library's CPU time
# counted at this machine's speed (host-speed = node speed).
settings=(
    --cfg=smpi/privatization:dlopen --cfg=smpi/privatize-libs:libmdloader.so.0
    --cfg=smpi/test:1e-7 --cfg=smpi/grow-injected-times:no
    --cfg=smpi/alltoallv:pair --cfg=smpi/alltoall:pair
    --cfg=smpi/allgather:ring --cfg=smpi/allgatherv:ring --cfg=smpi/allreduce:rdb
    --cfg=smpi/bcast:binomial_tree --cfg=smpi/barrier:ompi_recursivedoubling
    --cfg=smpi/host-speed:1Gf
    --cfg=smpi/display-timing:yes --log=root.thres:warning
    ${SMPI_EXTRA:-}
)
{
    echo "# library built at commit $(cat "$lib/BUILD_COMMIT" 2>/dev/null || echo unknown), bench at $(git -C "$root" rev-parse --short HEAD)"
    echo "# simgrid $(smpirun -version 2>/dev/null | head -n1 || true)"
    echo "# $platform"
    echo "# smpirun -np $P ${settings[*]} smpi_client $PER_RANK $SIZE $STEPS $BATCHES"
    echo "# env $(env | grep '^MDL_\|^EPOCH_\|^ENGINES=' | sort | tr '\n' ' ')"
    echo "# started $(date -u +%FT%TZ)"
} >"$out"
start=$(date +%s)
# smpirun's -tmpdir is broken in 3.32: TMPDIR places the per-rank library copies;
# privatize-libs dlopens the SONAME, found through LD_LIBRARY_PATH.
TMPDIR=$work LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} smpirun -np "$P" -platform "$work/platform.xml" -hostfile "$work/hosts" "${settings[@]}" \
    "$client" "$PER_RANK" "$SIZE" "$STEPS" $BATCHES >>"$out" 2>"$work/stderr" || {
    tail -n 20 "$work/stderr" >&2; echo "# FAILED" >>"$out"; exit 1; }
grep -i "simulated time\|wall" "$work/stderr" | sed 's/^/# /' >>"$out" || true
echo "# wall seconds $(($(date +%s) - start))" >>"$out"
cat "$out"
