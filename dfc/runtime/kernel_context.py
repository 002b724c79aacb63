"""What a kernel sees besides its inputs (KernelContext), and the truth of a Switch predicate.

Shared by the executor and the reference interpreter, which judges it: neither imports the other.
"""
from dfc.errors import DfcRuntimeError
from dfc.runtime import checkpoints, containers


class KernelContext:
    """What a kernel may see besides its inputs.

    container: name -> dfc.runtime.containers.Container, where Variables live ("" is the
    session's default container); kernels reach state only through it.
    memory: the device's MemoryTracker when it accounts bytes (else None);
    swapper: the device's Swapper when stack swapping is on (dfc/runtime/memory.py);
    files: the checkpoints.Directory that Save/Restore paths resolve in;
    memory_limit: the session's dfc.runtime.limits.MemoryLimit (or None), for runners that make
    their own kernels (kernel_for(node, xp, ctx.memory_limit));
    abort: in a partition, a callable that raises Aborted once the run must stop (another partition
    failed, or the caller was interrupted); long fused loops call it now and then.
    trace: a dfc.runtime.trace.Trace recording the run (None: no tracing, kernels run unwrapped);
    summary: the dfc.runtime.kernels.summary_kernels.FileWriter summary ops write to (None: nowhere);
    progress: the progress display progress ops update (None: bars are off). Both are "auto" in a
    context no Session made (an op run eagerly): each op then finds its writer / display itself.
    """
    __slots__ = ("container", "run_count", "tag", "print", "memory", "swapper", "device", "files", "memory_limit",
                 "abort", "trace", "summary", "progress",
                 "__weakref__")     # a MemoryLimit counts a run's stack entries until its context is gone

    def __init__(self, container=None, run_count=0, printer=print, memory=None, swapper=None, device=None,
                 files=None, memory_limit=None):
        self.container = container or containers.get
        self.files = files or checkpoints.Directory()
        self.run_count, self.tag, self.print = run_count, (), printer
        self.memory, self.swapper, self.device = memory, swapper, device
        self.memory_limit = memory_limit
        self.abort = None
        self.trace = None
        self.summary = self.progress = "auto"


def predicate(v, node, truth=None):
    """The truth of a Switch predicate, which must be one bool (a loaded graph's types may say it is);
    `truth`: a devices.Predicates that brings device values to the host once."""
    try:
        return bool(v) if truth is None else truth(v)
    except (ValueError, TypeError):
        raise DfcRuntimeError(f"{node.op} predicate must be a scalar bool, got "
                              f"{getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}",
                              node=node.name, loc=node.loc) from None
