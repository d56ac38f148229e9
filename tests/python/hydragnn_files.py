"""HydraGNN's dataset files, written and read here as HydraGNN's own code does, for
the tests of mdloader.sources (hydragnn itself cannot be imported in the test
environments: it needs torch_scatter, built from source).

``write_adios`` follows ``hydragnn.utils.datasets.adiosdataset.AdiosWriter.save``
(ORNL/HydraGNN d251f816): per label the ``ndata`` and ``keys`` attributes, per key the
global array concatenated along the one dimension whose length varies (0 where none
does), ``variable_dim``, ``variable_count`` and ``variable_offset``, the global
attributes last; each writer rank's graphs are one block of every variable, as its
parallel writer makes them (``writers`` emulates that many ranks in one process).
``adios_graph`` is ``AdiosDataset.__getitem__`` (``get`` from the file, not preloaded,
and the ``dataset_name`` tag). ``write_pickle`` / ``pickle_graph``: ``SimplePickleWriter``
and ``SimplePickleDataset.__getitem__``.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import torch
from torch_geometric.data import Data

NAMES = ("ani1x", "qm7x", "mptrj", "alexandria", "transition1x", "omat24", "oc2020_all", "oc2022", "omol25", "qcml",
         "odac23", "nabla2dft", "oc2025", "opoly2026")


def molecules(n: int, seed: int = 0, edges: bool = True) -> list:
    """QM9-like graphs with HydraGNN's attributes: x [n, 2] float32, pos [n, 3], edge_index
    [2, m] int64, edge_attr [m, 1], y [1, 1]; sizes vary (a few with no edges)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        atoms = int(rng.integers(1, 12))
        m = int(rng.integers(0, 3 * atoms)) if i % 7 else 0
        data = Data(x=torch.from_numpy(rng.normal(size=(atoms, 2)).astype(np.float32)),
                    pos=torch.from_numpy(rng.normal(size=(atoms, 3)).astype(np.float32)))
        if edges:
            data.edge_index = torch.from_numpy(rng.integers(0, atoms, size=(2, m)))
            data.edge_attr = torch.from_numpy(rng.normal(size=(m, 1)).astype(np.float32))
        data.y = torch.tensor([[float(rng.normal())]])
        out.append(data)
    return out


def write_adios(path: str, sets: dict, attributes: dict = None, writers: int = 2, skip: tuple = ()) -> None:
    """``sets``: label -> list of Data (all of one attribute set), written by ``writers``
    emulated ranks, each an even contiguous part. ``skip``: variables left out (a
    damaged file)."""
    import adios2.bindings as ad2

    adios = ad2.ADIOS()
    io = adios.DeclareIO(path)
    io.Parameters()["StatsLevel"] = "Off"
    engine = io.Open(path, ad2.Mode.Write)
    total = 0
    for label, graphs in sets.items():
        parts = np.array_split(np.arange(len(graphs)), writers)
        ns = [len(p) for p in parts]
        io.DefineAttribute(f"{label}/ndata", np.array(sum(ns)))
        total += sum(ns)
        keys = list(graphs[0].keys())
        io.DefineAttribute(f"{label}/keys", keys)
        for k in sorted(keys):
            arrays = [[_array(graphs[i][k]) for i in p] for p in parts]
            everything = [a for per in arrays for a in per]
            lo, hi = np.min([a.shape for a in everything], axis=0), np.max([a.shape for a in everything], axis=0)
            varying = [d for d in range(len(lo)) if lo[d] != hi[d]]
            assert len(varying) < 2
            vdim = varying[0] if varying else 0
            vals = [np.ascontiguousarray(np.concatenate(per, axis=vdim)) for per in arrays]
            shape = list(vals[0].shape)
            shape[vdim] = sum(v.shape[vdim] for v in vals)
            var = None
            first = 0
            for v in vals:
                start = [0] * len(shape)
                start[vdim] = first
                if f"{label}/{k}" in skip:
                    break
                if var is None:
                    var = io.DefineVariable(f"{label}/{k}", v, shape, start, list(v.shape), False)
                else:
                    var.SetSelection([start, list(v.shape)])
                engine.Put(var, v, ad2.Mode.Sync)
                first += v.shape[vdim]
            io.DefineAttribute(f"{label}/{k}/variable_dim", np.array(vdim))
            counts = [np.array([a.shape[vdim] for a in per]) for per in arrays]
            for table in ("count", "offset"):
                var, done, base = None, 0, 0
                for c in counts:
                    if f"{label}/{k}/variable_{table}" in skip:
                        break
                    values = c if table == "count" else base + np.cumsum(c) - c
                    if var is None:
                        var = io.DefineVariable(f"{label}/{k}/variable_{table}", values, [sum(ns)], [done], [len(c)],
                                                False)
                    else:
                        var.SetSelection([[done], [len(c)]])
                    engine.Put(var, values, ad2.Mode.Sync)
                    done, base = done + len(c), base + int(c.sum())
    io.DefineAttribute("total_ndata", np.array(total))
    for name, value in (attributes or {}).items():
        io.DefineAttribute(name, value)
    engine.Close()


def _array(value) -> np.ndarray:
    """An attribute as AdiosWriter.save stores it: a tensor's array, a numpy number as a
    1-element array, a str as its utf-8 bytes (uint8)."""
    if isinstance(value, torch.Tensor):
        return value.cpu().numpy()
    if isinstance(value, (np.floating, np.integer)):
        return np.array((value,))
    if isinstance(value, str):
        return np.frombuffer(value.encode("utf-8"), dtype=np.uint8)
    return value


def adios_graph(path: str, label: str, idx: int) -> Data:
    """HydraGNN's ``AdiosDataset(path, label, comm)[idx]``, without preload."""
    import adios2

    with adios2.FileReader(path) as f:
        keys = f.read_attribute_string(f"{label}/keys")
        attrs = f.available_attributes()
        name = f.read_attribute_string("dataset_name") if "dataset_name" in attrs else None
        data = Data()
        for k in keys:
            if k == "dataset_name":
                continue
            shape = list(f.inquire_variable(f"{label}/{k}").shape())
            vdim = int(np.asarray(f.read_attribute(f"{label}/{k}/variable_dim")).reshape(-1)[0])
            start, count = [0] * len(shape), list(shape)
            start[vdim] = int(f.read(f"{label}/{k}/variable_offset")[idx])
            count[vdim] = int(f.read(f"{label}/{k}/variable_count")[idx])
            if 0 in count:
                # HydraGNN's get reads these too, and adios2 2.12's FileReader fails on an
                # empty selection (ValueError: cannot convert float NaN to integer): its
                # graphs without edges cannot be read; the array they stand for.
                dtype = adios2.type_adios_to_numpy(f.inquire_variable(f"{label}/{k}").type())
                data[k] = torch.tensor(np.empty(count, dtype=dtype))
            else:
                val = f.read(f"{label}/{k}", start, count)
                # As its get: a uint8 variable is a string ("Tensors do not support strings").
                data[k] = val.tobytes().decode("utf-8") if val.dtype == np.uint8 else torch.tensor(val)
    return _tagged(data, name[0] if isinstance(name, list) and len(name) == 1 else name)


def _tagged(data: Data, name) -> Data:
    if name is not None:
        data.dataset_name = torch.tensor([[NAMES.index(name) if name in NAMES else -1]])
    return data


def write_pickle(basedir: str, label: str, graphs: list, attrs: dict = None, use_subdir: bool = False,
                 nmax_persubdir: int = 10_000) -> None:
    """SimplePickleWriter of one rank holding every graph."""
    os.makedirs(basedir, exist_ok=True)
    with open(os.path.join(basedir, f"{label}-meta.pkl"), "wb") as f:
        for value in (None, None, len(graphs), use_subdir, nmax_persubdir, attrs or {}):
            pickle.dump(value, f)
    for i, data in enumerate(graphs):
        where = os.path.join(basedir, str(i // nmax_persubdir)) if use_subdir else basedir
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, f"{label}-{i}.pkl"), "wb") as f:
            pickle.dump(data, f)


def pickle_graph(basedir: str, label: str, idx: int) -> Data:
    """HydraGNN's ``SimplePickleDataset(basedir, label)[idx]``."""
    with open(os.path.join(basedir, f"{label}-meta.pkl"), "rb") as f:
        meta = [pickle.load(f) for _ in range(6)]
    use_subdir, nmax, attrs = meta[3], meta[4], meta[5] or {}
    where = os.path.join(basedir, str(idx // nmax)) if use_subdir else basedir
    with open(os.path.join(where, f"{label}-{idx}.pkl"), "rb") as f:
        data = pickle.load(f)
    return _tagged(data, attrs.get("dataset_name"))
