"""fairchem's command line (``fairchem -c config.yaml``) for a job launched by mpirun:

    mpirun -n P python -m mdloader.fairchem_launch -c config.yaml [hydra overrides ...]

fairchem's own local launcher starts its ranks with torch elastic, each of which would
be an MPI job of one rank (``mdloader.Loader`` refuses that). Here the ranks are MPI's:
rank 0 composes the config as ``fairchem`` does (with ``job.scheduler.mode=LOCAL``, one
node of P ranks), makes its run folder and saves the canonical config there; every rank
then runs fairchem's own SPMD program (``runner_wrapper``: torch.distributed with MPI's
rank and world size, the runner from the config, ``runner.run()``) on that saved config.
"""

from __future__ import annotations

import argparse
import os
import sys

from .ddp import free_port


def main(argv: list | None = None) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ap = argparse.ArgumentParser(prog="python -m mdloader.fairchem_launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--config", required=True)
    args, overrides = ap.parse_known_args(argv)
    saved, problem = None, ""
    if comm.rank == 0:
        try:
            saved = _compose_and_save(args.config, overrides, comm.size)
        except Exception as err:  # noqa: BLE001 - told to every rank
            problem = f"{type(err).__name__}: {err}"
    saved, problem = comm.bcast((saved, problem))
    if problem:
        raise SystemExit(f"mdloader.fairchem_launch: the config {args.config} failed on rank 0: {problem}")
    _set_torch_distributed_env(comm)

    from fairchem.core.launchers.api import JobConfig
    from fairchem.core.launchers.slurm_launch import runner_wrapper
    from omegaconf import OmegaConf

    # The saved job section typed again (its enums are saved by name), as fairchem's CLI
    # hands it over.
    runner_wrapper(OmegaConf.merge({"job": OmegaConf.structured(JobConfig)}, OmegaConf.load(saved)))
    return 0


def _compose_and_save(config: str, overrides: list, ranks: int) -> str:
    """fairchem's config, composed and canonicalised as ``fairchem -c`` does it, run
    locally by ``ranks`` ranks on one node; saved in its run folder (returned)."""
    from fairchem.core._cli import get_hydra_config_from_yaml
    from omegaconf import OmegaConf

    local = ["++job.scheduler.mode=LOCAL", "++job.scheduler.num_nodes=1", f"++job.scheduler.ranks_per_node={ranks}",
             "++job.scheduler.distributed_init_method=TCP"]
    cfg = get_hydra_config_from_yaml(config, [*overrides, *local])
    os.makedirs(cfg.job.run_dir, exist_ok=True)
    os.makedirs(cfg.job.metadata.log_dir, exist_ok=True)
    OmegaConf.save(cfg, cfg.job.metadata.config_path)
    return cfg.job.metadata.config_path


def _set_torch_distributed_env(comm) -> None:
    """RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from MPI: rank 0 picks
    a free port on MASTER_ADDR (default loopback: one node)."""
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = free_port(comm, addr)
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    os.environ.update(RANK=str(comm.rank), WORLD_SIZE=str(comm.size), LOCAL_RANK=str(node.rank), MASTER_ADDR=addr,
                      MASTER_PORT=str(port))
    node.Free()


if __name__ == "__main__":
    sys.exit(main())
