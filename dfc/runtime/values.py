"""The values the executor passes between nodes besides arrays.

DEAD is the value of an output on an untaken branch (Figure 5's is_dead):
kernels never see it, and every execution path (executor, fused loops,
partitions) tests for it by identity.
"""


class _Dead:
    __slots__ = ()

    def __repr__(self):
        return "DEAD"


DEAD = _Dead()
