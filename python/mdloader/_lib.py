"""Finding and loading libmdloader.so, and the ctypes prototypes of its C API.

The C API is declared in include/mdloader.h, which is the reference for every call.
The library is found, in this order:

1. ``MDLOADER_LIBRARY``: the full path of the shared library (when set, it is the only
   candidate: an explicit choice is never replaced by another library silently);
2. ``MDLOADER_PREFIX``: an install prefix, searched as ``PREFIX/lib/libmdloader.so``
   (and ``lib64``, ``.so.0``);
3. next to this package: ``mdloader/libmdloader.so``, and the prefix the package is
   installed under (``PREFIX/lib/pythonX.Y/site-packages/mdloader`` -> ``PREFIX/lib``).

If none of them has it, :class:`LibraryNotFound` lists every place that was tried.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from pathlib import Path

__all__ = ["LibraryNotFound", "load_library", "library_path", "candidates", "mpi_family_of_library"]


class LibraryNotFound(OSError):
    """libmdloader.so was not found (or could not be loaded); the message lists what was tried."""


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: str | None = None

_NAMES = ("libmdloader.so", "libmdloader.so.0")


@atexit.register
def _before_mpi_finalize() -> None:
    """Python's exit handlers run before mpi4py's MPI_Finalize: from then on no progress
    thread of an open loader calls MPI (MPI forbids other threads in MPI while
    MPI_Finalize runs, which closes the loaders left open). Registered when this module
    is imported, before the package's other exit handlers (which end epochs and may
    still fetch), so that it runs after them."""
    if _lib is not None and hasattr(_lib, "mdl_before_mpi_finalize"):
        _lib.mdl_before_mpi_finalize()


def candidates() -> list[tuple[str, Path]]:
    """Every (reason, path) the loader tries, in order."""
    found: list[tuple[str, Path]] = []
    explicit = os.environ.get("MDLOADER_LIBRARY")
    if explicit:
        return [("MDLOADER_LIBRARY", Path(explicit))]
    prefix = os.environ.get("MDLOADER_PREFIX")
    if prefix:
        for libdir in ("lib", "lib64"):
            for name in _NAMES:
                found.append(("MDLOADER_PREFIX", Path(prefix) / libdir / name))
    here = Path(__file__).resolve().parent
    for name in _NAMES:
        found.append(("next to the package", here / name))
    # PREFIX/lib/pythonX.Y/site-packages/mdloader -> PREFIX/lib
    parts = here.parts
    if len(parts) >= 4 and parts[-2] in ("site-packages", "dist-packages") and parts[-3].startswith("python"):
        libdir = Path(*parts[:-3])
        for name in _NAMES:
            found.append(("installation prefix of the package", libdir / name))
    return found


def load_library() -> ctypes.CDLL:
    """The loaded library (loaded on first use, then cached)."""
    global _lib, _path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for reason, path in candidates():
            if not path.is_file():
                tried.append(f"  {path}  ({reason}): no such file")
                continue
            try:
                # RTLD_GLOBAL: MPI's own plugins resolve symbols of libmpi through it.
                lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError as err:
                tried.append(f"  {path}  ({reason}): {err}")
                continue
            _declare(lib)
            _lib, _path = lib, str(path)
            return lib
        if not tried:
            tried.append("  (no candidate)")
        if os.environ.get("MDLOADER_LIBRARY"):
            tried.append("  (MDLOADER_LIBRARY is set, so nothing else was tried)")
        raise LibraryNotFound(
            "libmdloader.so not found. Tried:\n"
            + "\n".join(tried)
            + "\nSet MDLOADER_LIBRARY=/path/to/libmdloader.so or MDLOADER_PREFIX=<install prefix>"
            " (the library must be built for the same MPI as mpi4py)."
        )


def library_path() -> str:
    """The path of the loaded library (loads it if needed)."""
    load_library()
    assert _path is not None
    return _path


def mpi_family_of_library(path: str) -> str | None:
    """'openmpi', 'mpich' or None: which MPI the shared library at path links against,
    read from the names it needs (libmpi.so.40 is Open MPI, libmpich.so.12 MPICH)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    if b"libmpich.so" in blob:
        return "mpich"
    if b"libmpi.so.40" in blob:
        return "openmpi"
    return None


c_u64 = ctypes.c_uint64
c_u64_p = ctypes.POINTER(ctypes.c_uint64)
c_handle_p = ctypes.POINTER(ctypes.c_void_p)


def _declare(lib: ctypes.CDLL) -> None:
    c_int = ctypes.c_int
    lib.mdl_init_f.argtypes = [c_int, c_handle_p]
    lib.mdl_init_f.restype = c_int
    if hasattr(lib, "mdl_init_replicated_f"):
        lib.mdl_init_replicated_f.argtypes = [c_int, c_int, c_handle_p]
        lib.mdl_init_replicated_f.restype = c_int
        c_u32_p = ctypes.POINTER(ctypes.c_uint32)
        lib.mdl_replica_info.argtypes = [ctypes.c_void_p, c_u32_p, c_u32_p, c_u32_p, c_u32_p]
        lib.mdl_replica_info.restype = c_int
        lib.mdl_replica_part.argtypes = [ctypes.c_void_p, c_u64, c_u64_p, c_u64_p]
        lib.mdl_replica_part.restype = c_int
    lib.mdl_register_shard.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, c_u64]
    lib.mdl_register_shard.restype = c_int
    lib.mdl_num_samples.argtypes = [ctypes.c_void_p, c_u64_p]
    lib.mdl_num_samples.restype = c_int
    lib.mdl_sample_size.argtypes = [ctypes.c_void_p, c_u64, c_u64_p]
    lib.mdl_sample_size.restype = c_int
    lib.mdl_fetch_batch.argtypes = [
        ctypes.c_void_p,  # h
        ctypes.c_void_p,  # ids (const uint64_t *)
        ctypes.c_size_t,  # n
        ctypes.c_void_p,  # out
        c_u64,  # out_cap
        ctypes.c_void_p,  # out_offsets (uint64_t *)
    ]
    lib.mdl_fetch_batch.restype = c_int
    lib.mdl_set_backend.argtypes = [ctypes.c_void_p, c_int]
    lib.mdl_set_backend.restype = c_int
    lib.mdl_finalize.argtypes = [c_handle_p]
    lib.mdl_finalize.restype = c_int
    if hasattr(lib, "mdl_before_mpi_finalize"):
        lib.mdl_before_mpi_finalize.argtypes = []
        lib.mdl_before_mpi_finalize.restype = None
    # The built-in sampler (libraries from 0.1 with the sampler; absent in older builds).
    if hasattr(lib, "mdl_epoch_begin"):
        lib.mdl_epoch_begin.argtypes = [ctypes.c_void_p, c_u64, c_u64, c_u64, c_int, c_int]
        lib.mdl_epoch_begin.restype = c_int
        lib.mdl_next_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(c_u64_p), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(c_u64_p), ctypes.POINTER(ctypes.c_size_t)]
        lib.mdl_next_batch.restype = c_int
        lib.mdl_epoch_seek.argtypes = [ctypes.c_void_p, c_u64]
        lib.mdl_epoch_seek.restype = c_int
        lib.mdl_set_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        lib.mdl_set_prefetch.restype = c_int
    if hasattr(lib, "mdl_epoch_begin_ids"):
        lib.mdl_epoch_begin_ids.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, c_u64]
        lib.mdl_epoch_begin_ids.restype = c_int
    if hasattr(lib, "mdl_epoch_ids"):
        lib.mdl_epoch_ids.argtypes = [c_u64, c_u64, c_u64, c_u64, c_u64, c_u64, c_int, c_int, c_u64,
                                      ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        lib.mdl_epoch_ids.restype = c_int
    if hasattr(lib, "mdl_stats_json"):
        lib.mdl_stats_json.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.mdl_stats_json.restype = ctypes.c_size_t
    if hasattr(lib, "mdl_stats_json_job"):
        lib.mdl_stats_json_job.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t)]
        lib.mdl_stats_json_job.restype = c_int
    lib.mdl_status_string.argtypes = [c_int]
    lib.mdl_status_string.restype = ctypes.c_char_p
    lib.mdl_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.mdl_last_error.restype = ctypes.c_size_t
