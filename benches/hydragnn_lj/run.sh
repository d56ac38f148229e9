#!/usr/bin/env bash
# HydraGNN's own examples/LennardJones, trained twice from one HydraGNN checkout: with
# its DDStore-backed DistDataset (--ddstore) and with the one-line switch to
# mdloader.pyg.DistDataset; per-epoch losses (must be identical), train-loop time, the
# time the loop waits for data, peak RSS per rank. Not in CI (needs HydraGNN's
# dependencies and pyddstore: README.md).
#
#   benches/hydragnn_lj/run.sh [ranks ...]          (default: 2)
#
# Environment:
#   HYDRAGNN_GIT   a HydraGNN git directory (default: the fetched mirror)
#   HYDRAGNN_REV   the revision to run (default HEAD)
#   LJ_EPOCHS      epochs per run (default 5)
#   LJ_RUNS        DDStore/mdloader pairs per rank count, alternated (default 1)
# Open MPI only (pyddstore is built against it). Work and logs: target/hydragnn_lj/.
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/benches/hydragnn_lj
GITDIR=${HYDRAGNN_GIT:-/work/.mirror/ORNL+HydraGNN/repo}
REV=$(git --git-dir="$GITDIR" rev-parse "${HYDRAGNN_REV:-HEAD}")
EPOCHS=${LJ_EPOCHS:-5}
RUNS=${LJ_RUNS:-1}
WORK=$ROOT/target/hydragnn_lj
SRC=$WORK/HydraGNN-${REV:0:8}
EX=$SRC/examples/LennardJones
PY=$ROOT/.venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

if [ ! -d "$SRC" ]; then
    mkdir -p "$SRC.tmp"
    git --git-dir="$GITDIR" archive "$REV" | tar -x -C "$SRC.tmp"
    # HydraGNN's own fixes, to this copy only (README.md names each).
    "$PY" "$HERE/fix_checkout.py" "$SRC.tmp"
    # The one-line switch, beside the original script.
    line='from hydragnn.utils.datasets.distdataset import DistDataset'
    grep -qx "$line" "$SRC.tmp/examples/LennardJones/LennardJones.py"
    sed "s|^$line\$|from mdloader.pyg import DistDataset|" "$SRC.tmp/examples/LennardJones/LennardJones.py" \
        >"$SRC.tmp/examples/LennardJones/LennardJones_mdloader.py"
    mv "$SRC.tmp" "$SRC"
fi
# The example's configuration with fewer epochs and no plots (a matplotlib figure per
# epoch is not what is measured); no early stop within them.
"$PY" - "$EX/LJ.json" "$EX/LJ_bench.json" "$EPOCHS" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["NeuralNetwork"]["Training"]["num_epoch"] = int(sys.argv[3])
config["Visualization"] = {key: False for key in config["Visualization"]}
json.dump(config, open(sys.argv[2], "w"), indent=1)
PY
export PYTHONPATH=$SRC:$ROOT/python
export MDLOADER_LIBRARY=$ROOT/target/openmpi/release/libmdloader.so
[ -f "$MDLOADER_LIBRARY" ] || "$ROOT/scripts/build.sh" openmpi
mkdir -p "$WORK/results"
cd "$EX"
for np in "${@:-2}"; do
    for run in $(seq 1 "$RUNS"); do
        for path in ddstore mdloader; do
            script=LennardJones.py
            [ $path = mdloader ] && script=LennardJones_mdloader.py
            name=LJ-np$np-$path-$run
            echo "== $name"
            # HydraGNN's own retry of a busy MASTER_PORT (8889 by default) moves rank 0
            # alone to the next port, and the job hangs: a free port is chosen here.
            port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
            # The first run writes the dataset (dataset/LJ.pickle), which every run reads.
            HYDRAGNN_MASTER_PORT=$port mpirun.openmpi -x HYDRAGNN_MASTER_PORT --oversubscribe --bind-to none -np "$np" "$PY" "$HERE/launch.py" "$WORK/results/$name" \
                "$script" --ddstore --pickle --inputfile LJ_bench.json --log "$name" >"$WORK/results/$name.out" 2>&1 ||
                { tail -30 "$WORK/results/$name.out"; exit 1; }
        done
    done
    "$PY" "$HERE/report.py" "$WORK/results" "$np" "$RUNS" | tee "$WORK/results/report-np$np.txt"
done
