#!/usr/bin/env bash
# QM9 through replica groups of one node against the engines, on two emulated hosts
# (network namespaces joined by a veth pair, 2 ranks each; tests/emulated_hosts.sh),
# Open MPI. See qm9_replica.py for the variants and what is measured.
#
#   benches/qm9_replica/run.sh [--epochs 3] [--batch-size 128]   (arguments go to qm9_replica.py)
#
# Needs root (ip netns), the library built (scripts/build.sh openmpi), the test
# environment .venv (tests/run_binding_tests.sh makes it) and the QM9 pack
# target/qm9/qm9.qm9g (made here from qm9pack when missing). Writes
# benches/qm9_replica/results/qm9_replica.csv and .log (with the commit and uptime).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=$ROOT/.venv/bin/python
LIB=$ROOT/target/openmpi/release/libmdloader.so
PACK=$ROOT/target/qm9/qm9.qm9g
OUT=$ROOT/benches/qm9_replica/results
mkdir -p "$OUT" "$ROOT/target/qm9"
[ -x "$PY" ] || { echo "no $PY: run tests/run_binding_tests.sh openmpi first" >&2; exit 1; }
[ -f "$LIB" ] || "$ROOT/scripts/build.sh" openmpi
if [ ! -f "$PACK" ]; then
    echo "converting QM9 (qm9pack) into $PACK"
    PYTHONPATH=$ROOT/python "$PY" -m mdloader.qm9 convert "$PACK"
fi
[ "$(id -u)" = 0 ] || { echo "needs root for network namespaces" >&2; exit 1; }

source "$ROOT/tests/emulated_hosts.sh"
trap mdl_hosts_delete EXIT
trap 'exit 130' INT TERM
mdl_hosts_create qrep 10.79.0 "$ROOT/target/qm9/nsexec-$$.sh"
mdl_hosts_openmpi sm,pt2pt -x MDLOADER_LIBRARY -x PYTHONPATH

log=$OUT/qm9_replica.log
{
    echo "# $(date -u +%FT%TZ), commit $(git -C "$ROOT" rev-parse --short HEAD), Open MPI, 2 emulated hosts x 2 ranks (TCP over veth)"
    echo "# uptime before: $(uptime)"
} >"$log"
export MDLOADER_LIBRARY=$LIB PYTHONPATH=$ROOT/python OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$ROOT" && timeout -k 10 1800 ip netns exec "$MDL_HOST_A" "${MDL_HOSTS_LAUNCH[@]}" \
    "$PY" "$ROOT/benches/qm9_replica/qm9_replica.py" "$PACK" --iface "$MDL_HOSTS_IFACE" \
    --csv "$OUT/qm9_replica.csv" "$@") 2>&1 | tee -a "$log"
echo "# uptime after: $(uptime)" >>"$log"
