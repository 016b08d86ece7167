"""rdmakit's exceptions: one class per ``rdmakit.Errc``, all under :class:`Error`.

Every exception carries ``errc`` (an :class:`rdmakit.Errc`), ``status`` (an :class:`rdmakit.Status`:
for a failed operation the completion status behind it, else ``Status.SUCCESS``), ``errno`` (for
system-call failures, else 0) and ``message``. Where a built-in exception means the same thing, the
class derives from it too, so ``except ValueError`` or ``except TimeoutError`` also catch them.
"""

import builtins

__all__ = [
    "Error", "InvalidArgumentError", "NotSupportedError", "NotFoundError", "UnavailableError",
    "ConnectionRefusedError", "ConnectionBrokenError", "StaleDescriptorError", "TimeoutError",
    "ResourceExhaustedError", "ProtocolError", "SystemCallError", "OperationError", "RemoteAccessError",
]


class Error(Exception):
    """Base of every rdmakit exception: ``errc``, ``status``, ``errno`` and ``message``."""

    def __init__(self, message, errc=None, status=None, errno=0):
        super().__init__(message)
        self.message = message
        self.errc = errc
        self.status = status
        self.errno = errno


class InvalidArgumentError(Error, ValueError):
    """The caller passed something malformed (a read-only buffer for write access, a bad slice, ...)."""


class NotSupportedError(Error, NotImplementedError):
    """The transport cannot do this (see ``Context.capabilities``)."""


class NotFoundError(Error, LookupError):
    """No such device, transport, region, ..."""


class UnavailableError(Error):
    """A library or device that is needed is missing."""


class ConnectionRefusedError(Error, builtins.ConnectionRefusedError):
    """Nobody listens there, or the handshake was rejected."""


class ConnectionBrokenError(Error, builtins.ConnectionError):
    """The connection failed earlier (sticky) or was closed."""


class StaleDescriptorError(Error):
    """A remote descriptor from another context or an earlier life of the peer."""


class TimeoutError(Error, builtins.TimeoutError):
    """A bounded wait ran out."""


class ResourceExhaustedError(Error, MemoryError):
    """A queue is full, or memory could not be allocated or pinned."""


class ProtocolError(Error):
    """The peer sent bytes that break the protocol."""


class SystemCallError(Error, OSError):
    """A system call failed; ``errno`` tells which error."""

    def __init__(self, message, errc=None, status=None, errno=0):
        Error.__init__(self, message, errc, status, errno)
        self.args = (message,)


class OperationError(Error):
    """An operation completed with an error ``status`` (``rdmakit.Status``)."""


class RemoteAccessError(OperationError):
    """An operation failed with ``Status.REMOTE_ACCESS``: bad key, out of bounds, or a right missing."""
