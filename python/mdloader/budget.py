"""Node-budget batches: graphs packed into batches of at most a budget of nodes (atoms),
the one home of that packing for every adapter (:mod:`mdloader.pyg`'s
``DataLoader(node_budget=...)``, :mod:`mdloader.fairchem_samplers`).

- :func:`pack`: greedy packing of ids in a given order, as fairchem's ``get_batches``
  and HydraGNN's ``CostAwareBatchSampler`` fill batches (a graph that does not fit
  starts the next batch), without a loop over graphs: each batch's end is one
  ``searchsorted`` on the running sum of node counts.
- :class:`NodeBudgetBatchSampler`: a distributed batch sampler on it. Every epoch the
  same plan on every rank, from (seed, epoch) alone: a permutation of all ids, packed;
  the batches sorted by cost (their node count) and cut into steps of one batch per
  rank, so that the batches run side by side in a step cost about the same (a step of
  data-parallel training waits for its slowest rank); the steps' order shuffled, and
  which rank takes which batch of a step rotated step by step. Every rank has the same
  number of steps (the plan padded with its first batches, or cut with
  ``drop_last``). ``start_step`` resumes an epoch there.

A leaf of the package (numpy only): the adapters import it; it imports nothing of theirs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import numpy as np

__all__ = ["pack", "NodeBudgetBatchSampler", "check_budget", "agreed_budget_sampler", "AGREEMENT_TAG",
           "other_ranks_agreeing"]


def check_budget(budget: Any, max_graphs: Any = None, what: str = "node_budget") -> None:
    """TypeError / ValueError unless ``budget`` is a positive integer and ``max_graphs``
    None or a positive integer."""
    for name, value in ((what, budget), ("max_graphs", max_graphs)):
        if value is None and name == "max_graphs":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be a positive integer, not {value!r}")
        if value <= 0:
            raise ValueError(f"{name} = {value}: it must be positive")


def pack(counts: Any, ids: Any, budget: int, max_graphs: Optional[int] = None, min_total: int = 0) -> list:
    """The batches (int64 arrays) of ``ids`` in this order, of at most ``budget`` nodes
    and ``max_graphs`` graphs each, filled greedily: a graph that does not fit starts the
    next batch. A batch of fewer than ``min_total`` nodes is dropped. ``counts``: the
    node count of each of ``ids``, none above ``budget`` (ValueError naming the first)."""
    check_budget(budget, max_graphs)
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if counts.size != ids.size:
        raise ValueError(f"{counts.size} node counts for {ids.size} ids")
    _check_counts(counts, ids, budget)
    starts, ends, _ = _bounds(counts, budget, max_graphs, min_total)
    return [ids[start:end] for start, end in zip(starts.tolist(), ends.tolist())]


def _check_counts(counts: np.ndarray, ids: np.ndarray, budget: int) -> None:
    """ValueError naming the first of ``ids`` whose count is unknown or above the budget."""
    if counts.size and counts.min() < 0:
        first = int(np.argmax(counts < 0))
        raise ValueError(f"graph {int(ids[first])}'s node count is not known ({int(counts[first])})")
    if counts.size and counts.max() > budget:
        first = int(np.argmax(counts > budget))
        raise ValueError(f"graph {int(ids[first])} has {int(counts[first])} nodes, above the budget of {budget} "
                         f"nodes a batch ({int((counts > budget).sum())} graphs are)")


def _bounds(counts: np.ndarray, budget: int, max_graphs: Optional[int], min_total: int = 0) -> tuple:
    """(starts, ends, running) of :func:`pack`'s batches as positions in ``counts``
    (checked already), and the running node count (``running[k]``: nodes before position
    k), so that a batch's cost is ``running[end] - running[start]`` without a sum."""
    running = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=running[1:])
    starts, ends = [], []
    start = 0
    while start < counts.size:
        # the last graph whose running sum stays within the budget from the batch's start
        end = int(np.searchsorted(running, running[start] + budget, side="right")) - 1
        if max_graphs is not None:
            end = min(end, start + max_graphs)
        if running[end] - running[start] >= min_total:
            starts.append(start)
            ends.append(end)
        start = end
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), running


class NodeBudgetBatchSampler:
    """Batches of at most ``budget`` nodes (and ``max_graphs`` graphs) for rank ``rank``
    of ``num_replicas``, steps balanced across ranks (see the module's doc).

    node_counts: every graph's node count, by id (``DistDataset.get_node_counts()``:
    from what registration stored, no payload read); the same on every rank. seed,
    shuffle: the permutation of each epoch (``set_epoch``), numpy's generator seeded
    with (seed, epoch); without ``shuffle`` the ids in order and the steps by cost.
    drop_last: cut the plan to a multiple of the ranks instead of padding it with its
    first batches. start_step: the next iteration starts at that step of the epoch
    (resuming), then is reset to 0.

    ``len()`` is the number of steps of an epoch, the same on every rank; iterating
    gives this rank's batches (lists of ids). ``epoch_plan(epoch)`` gives every rank's.
    """

    def __init__(self, node_counts: Any, budget: int, num_replicas: int, rank: int, *,
                 max_graphs: Optional[int] = None, seed: int = 0, shuffle: bool = True, drop_last: bool = False):
        check_budget(budget, max_graphs)
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not within num_replicas = {num_replicas}")
        self.node_counts = _compact(np.asarray(node_counts).reshape(-1))
        self.budget, self.max_graphs = int(budget), max_graphs
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.seed, self.shuffle, self.drop_last = int(seed), bool(shuffle), bool(drop_last)
        self.epoch, self.start_step = 0, 0
        self._plan: Optional[tuple] = None  # (epoch, its plan)
        self.epoch_plan(0)  # checks every count against the budget, here

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def set_epoch_and_start_step(self, epoch: int, start_step: int) -> None:
        self.epoch, self.start_step = int(epoch), int(start_step)

    def epoch_plan(self, epoch: int) -> list:
        """Every rank's batches of ``epoch``: a list of steps, each a list of
        ``num_replicas`` batches (arrays of ids), the one of rank r at index r."""
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1]
        self._plan = None  # the last epoch's plan is not held while this one is made
        n = self.node_counts.size
        rng = np.random.default_rng([self.seed, epoch])
        # int32 ids where they fit: the plan's tables are the per-graph memory of every
        # rank (at 10^8 graphs 4.5 GB with int64; the same draws and plan either way).
        ids = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
        order = rng.permutation(ids) if self.shuffle else ids
        ordered = self.node_counts[order]
        _check_counts(ordered, order, self.budget)
        starts, ends, running = _bounds(ordered, self.budget, self.max_graphs)
        ranks = self.num_replicas
        if len(starts) < ranks:
            raise ValueError(f"{len(starts)} batches of at most {self.budget} nodes for {ranks} ranks: fewer "
                             "batches than ranks (a smaller budget, or fewer ranks)")
        whole = len(starts) - len(starts) % ranks if self.drop_last else -(-len(starts) // ranks) * ranks
        taken = np.arange(whole) % len(starts)  # padded with the first batches, or cut
        starts, ends = starts[taken], ends[taken]
        cost = running[ends] - running[starts]
        batches = [order[start:end] for start, end in zip(starts.tolist(), ends.tolist())]
        by_cost = np.argsort(cost, kind="stable")
        steps = by_cost.reshape(-1, ranks)
        if self.shuffle:
            steps = steps[rng.permutation(len(steps))]
        # Rotation: no rank takes the dearest batch of every step.
        plan = [[batches[step[(r + s) % ranks]] for r in range(ranks)] for s, step in enumerate(steps)]
        self._plan = (epoch, plan)
        return plan

    def __len__(self) -> int:
        return len(self.epoch_plan(self.epoch))

    def __iter__(self) -> Iterator[list]:
        plan = self.epoch_plan(self.epoch)
        start, self.start_step = self.start_step, 0
        if not 0 <= start <= len(plan):
            raise ValueError(f"start step {start} is not within this epoch's {len(plan)} steps")
        return iter([step[self.rank].tolist() for step in plan[start:]])

    def step_costs(self, epoch: Optional[int] = None) -> np.ndarray:
        """(steps, ranks) node counts of ``epoch``'s batches (default: the current)."""
        plan = self.epoch_plan(self.epoch if epoch is None else epoch)
        return np.array([[self.node_counts[b].sum() for b in step] for step in plan], dtype=np.int64)


def _compact(counts: np.ndarray) -> np.ndarray:
    """Node counts as int32 where every one fits (int64 otherwise); a count that is not
    an integer is a TypeError."""
    if counts.size and not np.issubdtype(counts.dtype, np.integer):
        raise TypeError(f"node counts must be integers, not {counts.dtype}")
    if counts.size == 0 or (counts.min() >= -2**31 and counts.max() < 2**31):
        return counts.astype(np.int32, copy=False)
    return counts.astype(np.int64, copy=False)


#: The first item of what :func:`agreed_budget_sampler` allgathers. A rank that builds
#: a loader without a budget makes no collective call there; its next one (the
#: loader's first ``iter``: :func:`other_ranks_agreeing`) allgathers with a tag of its
#: own, so that where the budget was given on some ranks only, both sides see the
#: other's tag and raise, instead of mismatched collectives (a hang).
AGREEMENT_TAG = "mdloader.budget.agreed_budget_sampler"


def other_ranks_agreeing(everyone: list, tag: str) -> list:
    """The ranks whose item of an allgather is not tagged ``tag`` (in another call)."""
    return [rank for rank, item in enumerate(everyone) if not (isinstance(item, tuple) and item and item[0] == tag)]


def agreed_budget_sampler(comm: Any, node_counts: Callable[[], Any], budget: Any, *, max_graphs: Any = None,
                          seed: Any = 0, shuffle: bool = True, drop_last: bool = False,
                          caller: str = "NodeBudgetBatchSampler", conflict: str = "") -> NodeBudgetBatchSampler:
    """Collective (two allgathers and ``node_counts()``, itself collective): this rank's
    :class:`NodeBudgetBatchSampler` over the ranks of ``comm``, once every rank found its
    arguments good and the same as every other rank's. Otherwise, and where the plan
    cannot be made (a graph above the budget, fewer batches than ranks), TypeError /
    ValueError on every rank, naming the rank at fault or the values that differ;
    ``caller`` names the user's call, ``conflict`` (a TypeError's text) an argument of
    the caller's that this rank found at odds with a budget. Where a rank is in another
    call (it was given no budget), ValueError on the ranks here and there
    (:data:`AGREEMENT_TAG`)."""
    problem, kind = "", "ValueError"
    try:
        if conflict:
            raise TypeError(conflict)
        check_budget(budget, max_graphs)
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an integer, not {seed!r}")
    except (TypeError, ValueError) as err:
        problem, kind = str(err), type(err).__name__
    mine = (_plain(budget), _plain(max_graphs), _plain(seed), bool(shuffle), bool(drop_last))
    everyone = comm.allgather((AGREEMENT_TAG, problem, kind, mine))
    elsewhere = other_ranks_agreeing(everyone, AGREEMENT_TAG)
    if elsewhere:
        raise ValueError(f"{caller}: node_budget={budget!r} on rank {comm.Get_rank()}, but rank(s) {elsewhere} are "
                         "in another collective call (given no node_budget): pass the same node-budget arguments "
                         "on every rank")
    everyone = [item[1:] for item in everyone]
    for rank, (why, kind_name, _) in enumerate(everyone):
        if why:
            raise (TypeError if kind_name == "TypeError" else ValueError)(f"{caller}: on rank {rank}: {why}")
    for rank, (_, _, theirs) in enumerate(everyone):
        if theirs != everyone[0][2]:
            raise ValueError(f"{caller}: the node-budget arguments differ across ranks (node_budget, max_graphs, "
                             f"seed, shuffle, drop_last): rank 0's {everyone[0][2]}, rank {rank}'s {theirs}; every "
                             "rank must make the same batches")
    counts = node_counts()
    sampler, problem = None, ""
    try:
        sampler = NodeBudgetBatchSampler(counts, budget, comm.Get_size(), comm.Get_rank(), max_graphs=max_graphs,
                                         seed=seed, shuffle=shuffle, drop_last=drop_last)
    except (TypeError, ValueError) as err:
        problem = str(err)
    for rank, why in enumerate(comm.allgather(problem)):
        if why:
            raise ValueError(f"{caller}: on rank {rank}: {why}")
    return sampler


def _plain(value: Any) -> Any:
    """A value as compared across ranks: numpy integers as ints."""
    return int(value) if isinstance(value, np.integer) else value
