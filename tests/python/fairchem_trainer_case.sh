#!/usr/bin/env bash
# fairchem's own trainer (TrainEvalRunner, MLIPTrainEvalUnit, torchtnt) on mdloader.fairchem,
# launched by mpirun through mdloader.fairchem_launch, 2 ranks, against the same fairchem
# config on `format: ase_db` and fairchem's own get_dataloader: the same run, every
# logged training and validation loss equal.
#
#   tests/python/fairchem_trainer_case.sh openmpi|mpich PYTHON DATA_DIR
#
# PYTHON: the interpreter of scripts/install-fairchem.sh's venv for that MPI; DATA_DIR: the
# .aselmdb files (tests/python/fairchem_train_case.py writes them). Logs go to
# target/test-logs/bindings-<mpi>-fairchem-trainer-np2.log (and .ase-db); prints one line
# and exits 0 when the runs agree.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$ROOT/tests/lib.sh"
MPI=$1 PY=$2 DATA=$3
TIMEOUT=${MDL_TEST_TIMEOUT:-300}
LOG=$ROOT/target/test-logs/bindings-$MPI-fairchem-trainer-np2.log
mkdir -p "$(dirname "$LOG")"
env=(MDLOADER_LIBRARY="$ROOT/target/$MPI/release/libmdloader.so" PYTHONPATH="$ROOT/python")
trainer=("$PY" -m mdloader.fairchem_launch -c "$ROOT/tests/python/fairchem_config/train.yaml" data_dir="$DATA")
fairchems=dataloader._target_=fairchem.core.components.common.dataloader_builder.get_dataloader

rm -rf "$ROOT/target/fairchem-trainer-$MPI"
mdl_mpirun "$MPI" 2 "$LOG" "${env[@]}" -- "${trainer[@]}" job.run_dir="$ROOT/target/fairchem-trainer-$MPI/mdloader"
ours=$?
mdl_mpirun "$MPI" 2 "$LOG.ase-db" "${env[@]}" -- "${trainer[@]}" job.run_dir="$ROOT/target/fairchem-trainer-$MPI/ase-db" \
    oc20_train.format=ase_db eval_dataloader.dataset.dataset_configs.oc20.format=ase_db \
    "train_$fairchems" "eval_$fairchems"
theirs=$?

losses() { grep -o "'train/loss': [0-9.e-]*\|val/loss: [0-9.e-]*" "$1" | sort; }
if [ $ours -ne 0 ] || [ $theirs -ne 0 ]; then
    echo "the trainer failed: exit $ours on mdloader, $theirs on ase_db (logs: $LOG, $LOG.ase-db)"
    exit 1
fi
count=$(losses "$LOG" | wc -l)
if [ "$count" -lt 10 ] || ! grep -q "Training Completed 45 steps" "$LOG"; then
    echo "the run on mdloader logged $count losses and did not complete its 45 steps ($LOG)"
    exit 1
fi
if [ "$(losses "$LOG")" != "$(losses "$LOG.ase-db")" ]; then
    echo "the losses differ from the ase_db run's:"
    diff <(losses "$LOG") <(losses "$LOG.ase-db") | head -n 6
    exit 1
fi
echo "45 steps and 3 evaluations, all $count logged losses equal to the ase_db run's"
