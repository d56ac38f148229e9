"""How a call into libmdloader fails: its status codes and the exceptions raised for them."""

from __future__ import annotations

import ctypes
import enum
import sys
from typing import Union

from . import _lib
from .args import integer

__all__ = ["Status", "MDLError", "EpochTakenOver", "status_string", "last_error", "check"]


class Status(enum.IntEnum):
    """Status codes of the C API (enum mdl_status)."""

    OK = 0
    ERR_NULL_ARG = 1
    ERR_INVALID_ARG = 2
    ERR_OUT_OF_RANGE = 3
    ERR_BUFFER_TOO_SMALL = 4
    ERR_STATE = 5
    ERR_MPI = 6
    ERR_NO_MEMORY = 7
    ERR_PANIC = 8
    ERR_REMOTE = 9
    ERR_TIMEOUT = 10
    ERR_CALL_MISMATCH = 11



class MDLError(RuntimeError):
    """A call into libmdloader failed.

    Attributes: ``status`` (a :class:`Status`, or the raw int for an unknown code),
    ``message`` (the library's text from mdl_last_error: names the call and says why).
    A collective call that failed on another rank raises with ``Status.ERR_REMOTE`` here.
    """

    def __init__(self, status: int, message: str, call: str = ""):
        try:
            self.status: Union[Status, int] = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        #: The Python call that failed (``Loader.fetch``, ...), when known; ``message``
        #: names the library's call inside it.
        self.call = call
        name = self.status.name if isinstance(self.status, Status) else str(status)
        text = f"{message} [MDL_{name}]" if message else f"MDL_{name}"
        super().__init__(f"{call}: {text}" if call else text)


class EpochTakenOver(MDLError):
    """The epoch this iterator ran was ended before its end by another use of the same
    Loader (a second sampler or iterator, a plain fetch, :meth:`Loader.end_epoch`, or,
    while ``mdloader.pyg``'s thread runs the epoch, any call that every rank makes, such
    as :meth:`Loader.job_stats`). Raised on every rank at the same step (epochs begin and end
    collectively), before any MPI call, so a caller may begin its epoch again there."""

    def __init__(self):
        super().__init__(Status.ERR_STATE, "this epoch was ended before its end by another use of the same Loader (a "
                         "second sampler or iterator, a plain fetch or dataset[i], job_stats, end_epoch); "
                         "begin it again (a new iter) to go on",
                         "Loader.epoch")


def status_string(status: int) -> str:
    """The library's static text for a status code."""
    code = integer(status, "status")
    if not -(2**31) <= code < 2**31:  # c_int would wrap it onto a real status
        return "unknown status"
    text = _lib.load_library().mdl_status_string(code)
    return text.decode() if text else ""


def last_error() -> str:
    """The message of this thread's last failed call ("" when none failed)."""
    lib = _lib.load_library()
    n = lib.mdl_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.mdl_last_error(buf, n + 1)
    return buf.value.decode(errors="replace")


def check(status: int, prefix: str = "") -> None:
    """Raises MDLError for a failed call, with the library's own message (mdl_last_error)
    and the name of the package's public call the user made."""
    if status != 0:
        message = last_error() or status_string(status)
        raise MDLError(status, prefix + message if prefix else message, call=_public_caller())


def _public_caller() -> str:
    """The qualified name of the innermost public function or method of this package
    on the stack (``Loader.fetch``, ``DataLoader.__iter__``), skipping private helpers."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("mdloader"):
        name = frame.f_code.co_name
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            qualified = getattr(frame.f_code, "co_qualname", None)  # Python 3.11
            owner = frame.f_locals.get("self")
            return qualified or (f"{type(owner).__name__}.{name}" if owner is not None else name)
        frame = frame.f_back
    return ""
