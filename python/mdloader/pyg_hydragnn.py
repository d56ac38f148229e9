"""HydraGNN's ``DistDataset`` arguments and attributes, for :class:`mdloader.pyg.DistDataset`.

What HydraGNN's own ``DistDataset`` (hydragnn/utils/datasets/distdataset.py) does with
them, and what this package does instead:

- ``ddstore_width=W``: ranks are grouped by ``rank // W`` (``comm.Split``: the last group
  may be smaller), HydraGNN's ``ddstore_comm``. With ``local=False`` each group holds the
  whole dataset (here: the library's replica groups, W dividing the size of ``comm``);
  with ``local=True`` each rank passes its own graphs and a group's dataset is its ranks'
  graphs in rank order (``len()`` is the group's total, as HydraGNN's ``total_ns``): the
  library then runs on the group's communicator, one dataset per group.
- ``var_config``: HydraGNN keeps it and applies ``update_predicted_values`` and
  ``update_atom_features`` to the graphs it returns only on its feature-first path
  (``ddstore_store_per_sample=False``); its per-sample path (the default) returns them as
  stored. The same here, applied once to each graph before it is stored (the graphs
  returned are the same), with HydraGNN's own functions (``hydragnn`` must then be
  importable). ``ddstore_store_per_sample`` says nothing else here: the library's
  records are one layout.
- ``dataset_name``: HydraGNN's datasets tag every graph they return with
  ``dataset_name_dict.get(dataset_name, tensor([[-1]]))`` when ``dataset_name`` is set
  (``AbstractBaseDataset.__getitem__``); the same here for every graph and batch. Its
  built-in table of names is HydraGNN's: here a name needs ``dataset_name_dict``.

Every argument is checked on every rank and the verdicts agreed (one allgather) before
any other collective call, so that a bad or differing value raises on every rank.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

# What HydraGNN's DistDataset reads from var_config (its __init__ raises KeyError
# without one of them).
VAR_CONFIG_KEYS = ("input_node_features", "type", "output_index", "graph_feature_dims", "node_feature_dims")


def agree_arguments(comm: Any, label: str, ddstore_width: Any, local: Any, var_config: Any,
                    ddstore_store_per_sample: Any) -> int:
    """Collective (one allgather): the replica width, once every rank found its arguments
    good and the same as every other rank's; otherwise ValueError (TypeError for a value
    of the wrong type) on every rank, naming the first rank at fault."""
    size = comm.Get_size()
    width, problem, kind = size, "", ValueError
    try:
        width = _width(ddstore_width, size)
        for name, value in (("local", local), ("ddstore_store_per_sample", ddstore_store_per_sample)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {value!r}")
        if var_config is not None:
            missing = [key for key in VAR_CONFIG_KEYS if key not in var_config]
            if missing:
                raise ValueError(f"var_config has no {', '.join(missing)} (HydraGNN's DistDataset reads "
                                 f"{', '.join(VAR_CONFIG_KEYS)})")
        if not local and size % width:
            raise ValueError(f"ddstore_width={width} does not divide the {size} ranks: with local=False each group "
                             "of ddstore_width ranks holds one full copy")
    except (TypeError, ValueError) as err:
        problem, kind = str(err), type(err)
    # var_config by what DistDataset reads of it (the repr of those values: lists of
    # names and numbers in a config every rank loaded alike).
    config = None if problem or var_config is None else repr([var_config[key] for key in VAR_CONFIG_KEYS])
    mine = (width, local, config, ddstore_store_per_sample)
    everyone = comm.allgather((problem, kind.__name__, mine))
    for rank, (why, kind_name, _) in enumerate(everyone):
        if why:
            raise (TypeError if kind_name == "TypeError" else ValueError)(f"{label}: on rank {rank}: {why}")
    first = everyone[0][2]
    for rank, (_, _, theirs) in enumerate(everyone):
        if theirs != first:
            raise ValueError(f"{label}: the arguments differ across ranks (ddstore_width, local, var_config's "
                             f"{', '.join(VAR_CONFIG_KEYS)}, ddstore_store_per_sample): rank 0's {first}, "
                             f"rank {rank}'s {theirs}")
    return width


def _width(ddstore_width: Any, size: int) -> int:
    if ddstore_width is None:
        return size
    if isinstance(ddstore_width, bool) or not isinstance(ddstore_width, int):
        raise TypeError(f"ddstore_width must be an integer, not {ddstore_width!r}")
    if not 1 <= ddstore_width <= size:
        raise ValueError(f"ddstore_width={ddstore_width} is not in 1 .. {size} (the ranks of comm)")
    return ddstore_width


def var_config_updates(var_config: Optional[dict], per_sample: bool) -> tuple:
    """(a function applied to each graph before it is stored, or None; why it cannot be:
    "" when it can), HydraGNN's ``update_data_object`` where its DistDataset applies it."""
    if var_config is None or per_sample:
        return None, ""
    try:
        from hydragnn.preprocess import update_atom_features, update_predicted_values
    except ImportError as err:
        return None, f"var_config with ddstore_store_per_sample=False applies HydraGNN's updates: {err}"

    def update(data: Any) -> Any:
        data = data.clone()  # the caller's graphs stay as they were
        update_predicted_values(var_config["type"], var_config["output_index"], var_config["graph_feature_dims"],
                                var_config["node_feature_dims"], data)
        update_atom_features(var_config["input_node_features"], data)
        return data

    return update, ""


def name_tag(dataset: Any) -> tuple:
    """(the tensor each graph of ``dataset`` is tagged with as ``dataset_name``, or None
    where ``dataset_name`` is not set; why it cannot be: "" when it can). Local."""
    name = getattr(dataset, "dataset_name", None)
    if name is None:
        return None, ""
    table = getattr(dataset, "dataset_name_dict", None)
    if table is None:
        return None, (f"dataset_name={name!r} is set but dataset_name_dict is not (HydraGNN's built-in table of "
                      "names is its own): set dataset_name_dict = {name: torch.tensor([[id]])}")
    try:
        return torch.as_tensor(table.get(name, torch.tensor([[-1]]))), ""
    except (AttributeError, TypeError, ValueError, RuntimeError) as err:
        return None, f"dataset_name_dict[{name!r}] is not a tensor ({type(err).__name__}: {err})"


def tagged(batch: Any, tag: Optional[torch.Tensor]) -> Any:
    """``batch`` with every graph's ``dataset_name`` = ``tag``, as ``Batch.from_data_list``
    of the tagged graphs (concatenated along dimension 0; a 0-dim tag stacked)."""
    if tag is None:
        return batch
    graphs = batch.num_graphs
    rows = tag.shape[0] if tag.dim() else 1
    batch._store["dataset_name"] = tag.repeat(graphs, *[1] * (tag.dim() - 1)) if tag.dim() else tag.repeat(graphs)
    batch._slice_dict["dataset_name"] = torch.arange(graphs + 1, dtype=torch.int64) * rows
    batch._inc_dict["dataset_name"] = torch.zeros(graphs, dtype=torch.int64)
    return batch
