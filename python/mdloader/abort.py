"""One rank's uncaught exception ends the whole MPI job, as torch users expect.

Without this, a rank that raises (in a collate function, a KeyboardInterrupt from
SIGINT) leaves Python through ``MPI_Finalize``, where the library closes its loaders
collectively, while the other ranks wait in their next fetch: the job hangs for ever.
The hook prints the traceback as usual, then calls ``MPI_Abort`` on ``COMM_WORLD``,
which the launcher turns into the end of every rank in seconds (what ``python -m
mpi4py`` does too). It is installed when the package is imported (so that a rank
failing before its first Loader ends the job too), and acts only in a process that has
initialised MPI; ``MDLOADER_ABORT_ON_ERROR=0`` leaves the default behaviour alone.
``sys.exit`` does not reach the hook: ``python -m mpi4py`` covers it.
"""

from __future__ import annotations

import os
import sys
import time

_installed = False

# How long the hook waits between its last write and MPI_Abort. MPICH's launcher
# (Hydra) lost what a process wrote to stderr just before MPI_Abort in 14 of 200 runs of
# a plain C program under load (and MPICH's own abort line in 17); with a 0.2 s pause our
# line was lost in none of 200 (tests/c/repro/abort_output_loss.c). The job ends that
# much later, once.
_LAUNCHER_DRAIN_SECONDS = 0.2


def _enabled() -> bool:
    return os.environ.get("MDLOADER_ABORT_ON_ERROR", "1").strip().lower() not in ("0", "off", "no", "false")


def install() -> None:
    """Chain an abort after ``sys.excepthook`` (once; see the module's comment)."""
    global _installed
    if _installed or not _enabled():
        return
    _installed = True
    previous = sys.excepthook

    def abort_the_job(kind, value, traceback):
        previous(kind, value, traceback)
        # Only where this process uses MPI: importing mpi4py.MPI would initialise it
        # (in a torch worker process, say).
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            try:
                err = _release_captured_stderr(_caller())
                print(f"mdloader: rank {MPI.COMM_WORLD.Get_rank()}: uncaught {kind.__name__}: aborting the MPI job "
                      "(MDLOADER_ABORT_ON_ERROR=0 turns this off)", file=err, flush=True)
                sys.stdout.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream must not stop the abort
                pass
            time.sleep(_LAUNCHER_DRAIN_SECONDS)
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort_the_job


def _release_captured_stderr(caller):
    """Where this hook's output belongs, after writing out what the hook that called it
    captured of the traceback.

    torch.distributed's ``init_process_group`` wraps ``sys.excepthook``: it points
    ``sys.stderr`` at a buffer, calls the previous hook (this one) and, when that
    returns, which an abort never does, writes the buffer with ``[rankN]:`` prefixes to
    the stream it replaced (its local ``old_stderr``). Every DDP job's traceback was
    lost that way. Only that case is handled: any other ``sys.stderr`` is the user's,
    and is written to as it is."""
    if caller is None or caller.f_code.co_name != "_distributed_excepthook":
        return sys.stderr
    captured, destination = sys.stderr, caller.f_locals.get("old_stderr")
    if destination is None or not hasattr(captured, "getvalue"):
        return sys.stderr
    prefix = caller.f_locals.get("excepthook_prefix", "")
    lines = captured.getvalue().split("\n")
    destination.write("\n".join(f"{prefix}: {line}" if line and prefix else line for line in lines))
    destination.flush()
    return destination


def _caller():
    """The frame that called the hook, or None where Python called it directly."""
    try:
        return sys._getframe(2)
    except ValueError:
        return None
