"""Errors that cross the wire.

Every error has a stable ``code`` string. A service that fails sends ``{"code": ..., "message": ...}``;
the client raises the matching subclass of :class:`TensorwireError` (``error_from_wire``).
Where Python has a natural base class (``IndexError`` for a bad index, ``ValueError`` for a shape
mismatch) the error subclasses it too, so ``except IndexError`` works as it does with torch.
"""

from __future__ import annotations

import logging

_log = logging.getLogger("tensorwire.errors")


class TensorwireError(Exception):
    """Base class of every error tensorwire raises."""

    code = "TensorwireError"

    def __init__(self, message: str = "", *, node: int | None = None, where: str | None = None):
        self.message = message
        self.node = node
        self.where = where
        super().__init__(self._text())

    def _text(self) -> str:
        text = self.message
        if self.where:
            text = f"{text}\n  (recorded at {self.where})"
        return text

    def to_wire(self) -> dict:
        """The msgpack-able form of this error."""
        d = {"code": self.code, "message": self.message}
        if self.node is not None:
            d["node"] = self.node
        return d


class ShapeError(TensorwireError, ValueError, RuntimeError):
    """Shapes do not fit the op (broadcasting, matmul inner sizes, reshape sizes...). A ``RuntimeError`` too, as
    torch raises one for these (``except RuntimeError`` in a torch script catches it)."""

    code = "ShapeError"


class DTypeError(TensorwireError, TypeError, RuntimeError):
    """A dtype the op does not accept, or an impossible cast. A ``RuntimeError`` too, as torch's dtype errors
    ("expected scalar type Float but found Double") are."""

    code = "DTypeError"


class IndexOutOfRange(TensorwireError, IndexError, RuntimeError):
    """An index outside the tensor's extent (found on the client or while executing). A ``RuntimeError`` too, as
    torch's ``gather``/``index_select`` errors are ("index out of range in self")."""

    code = "IndexError"


class DeviceError(TensorwireError, RuntimeError):
    """An unknown or unavailable device, or tensors on different devices in one op."""

    code = "DeviceError"


class OutOfMemory(TensorwireError, MemoryError):
    """A device could not allocate a buffer."""

    code = "OutOfMemory"


class WorkerLost(TensorwireError, RuntimeError):
    """The worker holding a tensor died or stopped answering; its tensors are gone.

    ``device`` names the device whose worker was lost (it travels on the wire), so a client can forget what it
    cached there; the session itself goes on and works again once a worker serves the device."""

    code = "WorkerLost"

    def __init__(self, message: str = "", *, device: str | None = None, node: int | None = None,
                 where: str | None = None):
        self.device = device
        super().__init__(message, node=node, where=where)

    def to_wire(self) -> dict:
        d = super().to_wire()
        if self.device is not None:
            d["device"] = self.device
        return d


class ServiceUnavailable(TensorwireError, RuntimeError):
    """A service (autograd, collectives, a worker) is not registered with the dispatcher."""

    code = "ServiceUnavailable"


class Unauthorized(TensorwireError, PermissionError):
    """Bad or missing credentials, or a handle that belongs to another session."""

    code = "Unauthorized"


class ProtocolError(TensorwireError, ValueError):
    """A malformed message: bad framing, wrong types, unknown ops, absurd sizes, version mismatch."""

    code = "ProtocolError"


class NotFound(TensorwireError, KeyError):
    """A handle, plan or resource that does not exist."""

    code = "NotFound"

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return self._text()


class DependencyFailed(TensorwireError, RuntimeError):
    """An op could not run because an op it depends on failed (the message names that op)."""

    code = "DependencyFailed"


class QuotaExceeded(OutOfMemory):
    """A session asked for more memory on a device than its quota there (the message names the limit and the
    session's use); freeing tensors (``del``) makes room again."""

    code = "QuotaExceeded"


class Cancelled(TensorwireError, RuntimeError):
    """The session's work was cancelled (``tw.cancel()``, Ctrl-C while waiting, or the session closed)."""

    code = "Cancelled"


class ExecutionError(TensorwireError, RuntimeError):
    """A kernel raised an error that fits no other code."""

    code = "ExecutionError"


class ConnectionFailed(TensorwireError, ConnectionError):
    """The dispatcher could not be reached within the timeout."""

    code = "ConnectionFailed"


class ConfigurationError(TensorwireError, ValueError):
    """A setting the operator gave cannot work (an address without its ``tcp://``, a port another process holds);
    the message names the setting and how to fix it."""

    code = "ConfigurationError"


class TimeoutError_(TensorwireError, TimeoutError):
    """A request got no answer within its time limit."""

    code = "Timeout"


class CompileError(TensorwireError, RuntimeError):
    """``tw.compile`` was given arguments it refuses, or (with ``fullgraph=True``) a function it cannot replay."""

    code = "CompileError"


_BY_CODE: dict[str, type[TensorwireError]] = {}


def register_error(cls: type[TensorwireError]) -> type[TensorwireError]:
    """Register an error class under its ``code`` so ``error_from_wire`` can rebuild it."""
    _BY_CODE[cls.code] = cls
    return cls


for _cls in (TensorwireError, ShapeError, DTypeError, IndexOutOfRange, DeviceError, OutOfMemory, WorkerLost,
             ServiceUnavailable, Unauthorized, ProtocolError, NotFound, DependencyFailed, ExecutionError,
             ConnectionFailed, TimeoutError_):
    register_error(_cls)
register_error(QuotaExceeded)
register_error(Cancelled)
register_error(CompileError)
register_error(ConfigurationError)


def error_from_wire(d: dict, where: str | None = None) -> TensorwireError:
    """Rebuild the error a service sent (unknown codes become the base class, keeping the code)."""
    code = str(d.get("code", "TensorwireError"))
    cls = _BY_CODE.get(code, TensorwireError)
    err = cls(str(d.get("message", "")), node=d.get("node"), where=where)
    if cls is TensorwireError:
        err.code = code
    elif cls is WorkerLost and isinstance(d.get("device"), str):
        err.device = d["device"]
    return err


#: exceptions that mean "the request was malformed" when they escape a service's code (a missing key, a wrong type):
#: their Python text describes our internals, not the request, so it stays in the service's log
_INTERNAL = (TypeError, KeyError, AttributeError, AssertionError, LookupError, UnicodeError, RecursionError)


def error_to_wire(exc: BaseException, node: int | None = None) -> dict:
    """Turn any exception raised while serving into its wire form, choosing the closest code.

    No Python exception type or internal text crosses the wire: an exception of our own code's kind
    (``TypeError``, ``KeyError`` ...) becomes a ``ProtocolError`` saying the request was malformed; kernel errors
    (``ZeroDivisionError``, numpy's ``FloatingPointError`` ...) keep their message, under ``ExecutionError``."""
    if isinstance(exc, TensorwireError):
        d = exc.to_wire()
    elif isinstance(exc, MemoryError):
        d = {"code": OutOfMemory.code, "message": str(exc) or "out of memory"}
    elif isinstance(exc, IndexError):
        d = {"code": IndexOutOfRange.code, "message": str(exc)}
    elif isinstance(exc, (ValueError, TypeError)) and "shape" in str(exc):
        d = {"code": ShapeError.code, "message": str(exc)}
    elif isinstance(exc, _INTERNAL):
        _log.warning("a request could not be processed (answered as malformed)", exc_info=exc)  # the details
        d = {"code": ProtocolError.code, "message": "malformed request: the service could not process it (its log "
                                                    "has the details)"}
    else:
        d = {"code": ExecutionError.code, "message": str(exc) or "the kernel failed"}
    if node is not None:
        d["node"] = node
    return d
