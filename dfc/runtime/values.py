"""The values the executor passes between nodes besides arrays.

DEAD is the value of an output on an untaken branch (Figure 5's is_dead):
kernels never see it, and every execution path (executor, fused loops,
partitions, tasks of a cluster) tests for it by identity; it survives pickling.
"""


class _Dead:
    __slots__ = ()

    def __repr__(self):
        return "DEAD"

    def __reduce__(self):
        # Pickled (Send/Recv between processes) as a reference to this module's DEAD, so a dead signal
        # arrives as the same singleton and identity tests keep working in the receiving task.
        return "DEAD"


DEAD = _Dead()
