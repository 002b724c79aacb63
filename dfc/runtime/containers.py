"""Resource containers (whitepaper §4.7 "Containers"): where Variables live.

A container maps a shared name to a resource. The default container (name
"") lasts as long as the process and is shared by every graph, dfc.function,
trace and Session in it, so a Variable trained by one function is the same
Variable another function reads. Named containers are made on first use;
`names()` lists them and `reset(name)` drops a container's state, after which
each Variable starts again from its initial value.

    containers.get("").variable("w", init)   # the resource "w", made from init() if it is new
    containers.reset()                        # every Variable back to its initial value

The executor reaches state only through `Container.variable` and the
`VariableResource` methods (read / assign / snapshot), so a later container can
live in another process (a parameter-server task) behind the same interface.
"""
import threading

import numpy as np

from dfc.errors import DfcError, DfcRuntimeError

DEFAULT = ""


class VariableResource:
    """The backing store of one Variable: a value whose dtype and shape never change.

    Stored numpy values are read-only, so a value fetched from a graph or
    returned by `numpy()` can never change the Variable behind the user's back.
    """
    __slots__ = ("name", "value", "lock")

    def __init__(self, name, value):
        self.name, self.value, self.lock = name, _frozen(value), threading.Lock()

    def read(self):
        return self.value

    def place(self, xp):
        """Keep the value in the memory of array module `xp` (numpy, or cupy for a GPU): a Variable lives
        where the graph that uses it runs, and moves when a graph on another kind of device uses it."""
        with self.lock:
            on_gpu = hasattr(self.value, "__cuda_array_interface__")
            if xp is np and on_gpu:
                self.value = _frozen(self.value.get(), fresh=True)
            elif xp is not np and not on_gpu:
                self.value = xp.asarray(self.value)
        return self

    def assign(self, value, op="Assign", node=None):
        """Set the value (op "Assign") or add / subtract to it atomically; return the new value."""
        with self.lock:
            if op == "AssignAdd":
                value = _frozen(self.value + value, fresh=True)
            elif op == "AssignSub":
                value = _frozen(self.value - value, fresh=True)
            else:
                value = _frozen(value)
            self._check(value, node)
            self.value = value
            return value

    def _check(self, value, node):
        old = self.value
        if value.dtype != old.dtype or tuple(value.shape) != tuple(old.shape):
            raise DfcRuntimeError(f"cannot assign {value.dtype}{list(value.shape)} to variable {self.name!r} of "
                                  f"{old.dtype}{list(old.shape)}", node=node)

    def __repr__(self):
        return f"<VariableResource {self.name!r} {self.value.dtype}{list(self.value.shape)}>"


def _frozen(value, fresh=False):
    """`value` as an array nobody can write: a read-only copy, or `value` itself when it is already
    read-only or `fresh` (just computed, so no one else holds it). GPU arrays are stored as they are."""
    if isinstance(value, (np.generic, int, float, bool)):
        value, fresh = np.asarray(value), True
    if isinstance(value, np.ndarray) and value.flags.writeable:
        if not fresh:
            value = value.copy()
        value.flags.writeable = False
    return value


class Container:
    """A named set of resources, safe to use from many threads."""

    def __init__(self, name):
        self.name = name
        self._items = {}
        self._lock = threading.Lock()

    def variable(self, shared_name, init, node=None):
        """The Variable resource `shared_name`; made from `init()` (an array) if the container has none.

        `init()` also gives the dtype and shape the caller expects: an existing
        resource of another dtype or shape is an error, never reinterpreted.
        """
        with self._lock:
            r = self._items.get(shared_name)
            if r is None:
                r = self._items[shared_name] = VariableResource(shared_name, init())
                return r
        if not isinstance(r, VariableResource):
            raise DfcRuntimeError(f"resource {shared_name!r} in container {self.name!r} is a "
                                  f"{type(r).__name__}, not a Variable", node=node)
        want = init()
        if want.dtype != r.value.dtype or tuple(want.shape) != tuple(r.value.shape):
            raise DfcRuntimeError(f"variable {shared_name!r} in container {self.name!r} holds "
                                  f"{r.value.dtype}{list(r.value.shape)}, but this graph declares it "
                                  f"{want.dtype}{list(want.shape)}", node=node)
        return r

    def lookup(self, shared_name):
        """The resource `shared_name`, or None."""
        with self._lock:
            return self._items.get(shared_name)

    def names(self):
        with self._lock:
            return sorted(self._items)

    def snapshot(self):
        """shared name -> current value of every Variable (values are immutable, so no copy is needed)."""
        with self._lock:
            return {n: r.value for n, r in self._items.items() if isinstance(r, VariableResource)}

    def restore(self, values):
        """Put back a snapshot: those Variables take those values, Variables made since are dropped."""
        with self._lock:
            self._items = {n: VariableResource(n, v) for n, v in values.items()}

    def reset(self):
        with self._lock:
            self._items.clear()

    def __repr__(self):
        return f"<dfc container {self.name!r}: {', '.join(self.names()) or 'empty'}>"


_containers = {DEFAULT: Container(DEFAULT)}
_lock = threading.Lock()


def get(name=DEFAULT):
    """The container `name` (None or "" is the default one), made on first use."""
    name = DEFAULT if name is None else name
    if not isinstance(name, str):
        raise DfcError(f"a container name is a string, not {type(name).__name__}")
    with _lock:
        c = _containers.get(name)
        if c is None:
            c = _containers[name] = Container(name)
        return c


def names():
    """The names of the containers that exist ("" is the default one)."""
    with _lock:
        return sorted(_containers)


def reset(name=None):
    """Drop the state of container `name` (None: the default one); its Variables start again from their
    initial values. Named containers other than the default are removed."""
    name = DEFAULT if name is None else name
    with _lock:
        c = _containers.get(name)
        if c is None:
            raise DfcError(f"no container named {name!r} (containers: {', '.join(map(repr, sorted(_containers)))})")
        if name != DEFAULT:
            del _containers[name]
    c.reset()
