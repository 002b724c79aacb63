"""Every error a user can cause is a DfcError (or a subclass).

Errors carry an optional graph node name and a user source location
("file.py:12") so that messages point at the user's code, not at dfc.
"""


class DfcError(Exception):
    """Base class of all errors dfc raises for bad programs, graphs or input."""

    def __init__(self, message, node=None, loc=None):
        self.message = message
        self.node = node
        self.loc = loc
        super().__init__(self._format())

    def _format(self):
        parts = []
        if self.loc:
            parts.append(f"{self.loc}: ")
        if self.node:
            parts.append(f"[node {self.node}] ")
        parts.append(self.message)
        return "".join(parts)


class DfcGraphError(DfcError):
    """A malformed graph: bad JSON, unknown op, missing input, bad attr, cycle."""


class DfcTypeError(DfcError):
    """Dtype or shape mismatch found while building or loading a graph."""


class DfcIndexError(DfcTypeError, IndexError):
    """A constant index out of range of a dimension whose size is known while tracing."""


class DfcConversionError(DfcError):
    """Python source that dfc.function cannot convert (or converts unsafely)."""


class DfcRuntimeError(DfcError):
    """A kernel failed while the runtime executed a node."""


class DfcAssertionError(DfcRuntimeError):
    """An in-graph Assert whose condition was false."""


class DfcDeadlockError(DfcRuntimeError):
    """Nothing can make progress before the fetches are ready."""


class DfcQueueClosed(DfcRuntimeError):
    """A queue op that cannot complete because its queue is closed (TF's OutOfRange): a dequeue from a
    closed queue holding too few elements, or an enqueue to a closed queue."""


class DfcQueueTimeout(DfcDeadlockError):
    """A queue or accumulator op waited longer than its timeout (FIFOQueue(timeout=...)) for elements,
    room or gradients that nothing delivered."""


class DfcInputError(DfcError):
    """A missing or wrong feed / argument."""


class DfcOutOfMemory(DfcRuntimeError):
    """A device ran past its memory capacity."""
