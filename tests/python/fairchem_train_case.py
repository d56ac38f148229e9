"""A real fairchem model trained on .aselmdb data held by mdloader.fairchem, DDP over gloo
under mpirun: fairchem's UMA backbone (eSCNMDBackbone, its own unit tests' smallest
configuration: 2 layers, 16 channels, lmax 2, graphs made on the fly) with an energy
and a force head, fed through fairchem's MaxAtomDistributedBatchSampler.

    mpirun -n 2 python tests/python/fairchem_train_case.py DATA_DIR [--count 240] [--epochs 4]
        [--feeder mdloader|fairchem] [--max-atoms 120] [--check] [--steps N] [--no-model]

Rank 0 writes the data (ASE slabs and molecules, EMT energies and forces) when
DATA_DIR holds none. ``--feeder fairchem``: fairchem's own AseDBDataset and
get_dataloader (torch's DataLoader) on the same files, for the benchmark. Prints per
epoch the mean loss, the samples per second and the seconds the loop waited for its
batches (worst rank); ``--check`` fails unless the last epoch's loss is below 0.8x
the first's. ``--no-model``: the loop only takes the batches (the feeders alone).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mdloader.ddp import end_gloo, init_gloo  # noqa: E402

BACKBONE = {
    # tests/core/units/mlip_unit/backbone/K2L2.yaml of fairchem, direct forces
    "model": "fairchem.core.models.uma.escn_md.eSCNMDBackbone",
    "max_num_elements": 100, "sphere_channels": 16, "lmax": 2, "mmax": 2, "otf_graph": True,
    "max_neighbors": 20, "use_pbc": True, "use_pbc_single": True, "cutoff": 6.0, "edge_channels": 16,
    "distance_function": "gaussian", "num_distance_basis": 64, "regress_forces": True, "direct_forces": True,
    "num_layers": 2, "hidden_channels": 16, "norm_type": "rms_norm_sh", "act_type": "s2", "ff_type": "grid",
    "dataset_list": ["oc20"], "use_dataset_embedding": False, "radius_pbc_version": 2,
}
HEADS = {"energy": {"module": "fairchem.core.models.uma.escn_md.MLP_Energy_Head"},
         "forces": {"module": "fairchem.core.models.uma.escn_md.Linear_Force_Head"}}


def ensure_data(comm, folder: Path, count: int) -> None:
    problem = ""
    if comm.rank == 0 and not (folder / "metadata.npz").exists():
        try:
            from fairchem_data import write_aselmdb

            write_aselmdb(folder, count, files=4, seed=7)
        except Exception as err:  # noqa: BLE001 - told to every rank
            problem = f"{type(err).__name__}: {err}"
    problem = comm.bcast(problem)
    if problem:
        raise RuntimeError(f"rank 0 could not write the data: {problem}")


def loader_of(feeder: str, config: dict, sampler_fn, comm):
    """(loader, what closes it) of either feeder."""
    if feeder == "mdloader":
        from mdloader.fairchem import DistAseDBDataset, get_dataloader

        dataset = DistAseDBDataset(config, comm)
        return get_dataloader(dataset, sampler_fn), dataset.close
    from fairchem.core.components.common.dataloader_builder import get_dataloader
    from fairchem.core.datasets import AseDBDataset, data_list_collater

    return get_dataloader(AseDBDataset(config), sampler_fn, data_list_collater, num_workers=0), lambda: None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--count", type=int, default=240, help="structures written when DATA holds none")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--feeder", choices=("mdloader", "fairchem"), default="mdloader")
    ap.add_argument("--max-atoms", type=int, default=120)
    ap.add_argument("--steps", type=int, default=0, help="steps per epoch at most (0: all)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-model", action="store_true", help="take the batches and train nothing")
    args = ap.parse_args()

    import torch
    from fairchem.core.datasets.samplers.max_atom_distributed_sampler import MaxAtomDistributedBatchSampler
    from fairchem.core.models.base import HydraModel

    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ensure_data(comm, args.data, args.count)
    init_gloo(comm)
    config = {"src": str(args.data), "a2g_args": {"r_energy": True, "r_forces": True}}
    sampler_fn = functools.partial(MaxAtomDistributedBatchSampler, max_atoms=args.max_atoms, shuffle=True, seed=0)
    loader, close = loader_of(args.feeder, config, sampler_fn, comm)

    model = torch.nn.parallel.DistributedDataParallel(HydraModel(backbone=dict(BACKBONE), heads=dict(HEADS)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for epoch in range(args.epochs):
        loader.batch_sampler.set_epoch_and_start_iteration(epoch, 0)
        total = torch.zeros(3, dtype=torch.float64)  # loss sum, steps, structures
        waited = 0.0
        started = time.perf_counter()
        it = iter(loader)
        steps = len(loader) if not args.steps else min(args.steps, len(loader))
        for _ in range(steps):
            t0 = time.perf_counter()
            batch = next(it)
            waited += time.perf_counter() - t0
            total += torch.tensor([0.0, 1.0, batch.num_graphs], dtype=torch.float64)
            if args.no_model:
                continue
            out = model(batch)
            # per-atom energy and forces, against EMT's
            energy = out["energy"]["energy"].view(-1)
            e_loss = torch.mean(((energy - batch.energy) / batch.natoms) ** 2)
            f_loss = torch.mean((out["forces"]["forces"] - batch.forces) ** 2)
            loss = e_loss + f_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total[0] += loss.item()
        del it
        seconds = time.perf_counter() - started
        summed = comm.allreduce(total.numpy())
        worst_wait = comm.allreduce(waited, op=MPI.MAX)
        slowest = comm.allreduce(seconds, op=MPI.MAX)
        mean = summed[0] / summed[1]
        losses.append(mean)
        if comm.rank == 0:
            print(f"epoch {epoch} feeder {args.feeder}: loss {mean:.4f}, {summed[2] / slowest:.1f} samples/s, "
                  f"waited {worst_wait:.3f} s for data in {slowest:.2f} s ({int(summed[1]) // comm.size} steps, "
                  f"worst rank)", flush=True)
    close()
    end_gloo(comm)
    if comm.rank == 0:
        print(f"learned: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    if args.check and not args.no_model and not losses[-1] < 0.8 * losses[0]:
        if comm.rank == 0:
            print(f"FAILED: the loss did not fall below 0.8x the first epoch's ({losses[0]:.4f} -> {losses[-1]:.4f})")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
