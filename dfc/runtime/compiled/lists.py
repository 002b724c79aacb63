"""What Python does with the typed Lists that carry stacks and TensorArrays into and out of compiled frames
(resources.py), as functions in numba's disk cache.

A numba typed List's own Python methods (`len(lst)`, `lst[i]`, `lst.append(x)`, iterating it) are jitted
functions that numba never caches: each new process compiles them again for each element type, ~0.3-1 s
apiece, so a gradient frame loaded from the disk cache still spent seconds compiling on its first call in
every new process. These do the same with cache=True: machine code from the disk cache after the first time.
"""
from numba import njit


@njit(cache=True, nogil=True)
def length(lst):
    return len(lst)


@njit(cache=True, nogil=True)
def item(lst, i):
    return lst[i]


@njit(cache=True, nogil=True)
def append(lst, x):
    lst.append(x)


def items(lst):
    """The elements of a typed List as a Python list."""
    return [item(lst, i) for i in range(length(lst))]
