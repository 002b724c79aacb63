"""dfc.Variable: state that lives in a resource container and persists across runs, graphs and sessions.

    w = dfc.Variable(np.zeros(3), name="w")
    w.numpy()                 # its current value, outside any graph
    w.assign(np.ones(3))      # set it from Python (assign_add / assign_sub too)
    # inside traced code: w.read_value(), w.assign(v), w.assign_add(v) build graph nodes

The value lives in a container of dfc/runtime/containers.py (the process's
default one unless `container=` names another), under the Variable's shared
name: every dfc.function, trace, retrace, Session and loaded graph that names
it sees the same value (whitepaper §4.7). Each graph that uses the Variable
gets one VarHandle node (at the top level, never inside a loop or branch)
that finds the value by shared name, or makes it from the initial value
after a `dfc.containers.reset()` or in another process.

Shared names are unique in a process: the first Variable named "w" gets the
shared name "w", the next "w_1", and so on, unless `shared_name=` is given
(two Variables with one shared name are one Variable).
"""
import contextlib
import itertools
import threading

import numpy as np

from dfc.errors import DfcError, DfcInputError, DfcTypeError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, convert, const_array, current_builder, user_location
from dfc.runtime import containers
from dfc.runtime.devices import is_device_array
from dfc.runtime.session import convert_input

_creation = threading.local()      # .forbidden_in: the dfc.function being retraced, if any
update_hooks = threading.local()   # .hook(variable, op, value): takes traced updates instead of an Assign node


@contextlib.contextmanager
def creation_allowed(allowed, function_name):
    """While a dfc.function is retraced, creating a Variable is an error (it would be a new Variable
    with fresh state in the new trace, unlike the one the first trace uses)."""
    before = getattr(_creation, "forbidden_in", None)
    _creation.forbidden_in = None if allowed else function_name
    try:
        yield
    finally:
        _creation.forbidden_in = before


class UniqueNames:
    """Shared names handed out in this process: a name, or name_1, name_2, ... once it is taken."""

    def __init__(self):
        self.taken, self.lock = set(), threading.Lock()

    def take(self, name):
        with self.lock:
            for candidate in itertools.chain([name], (f"{name}_{k}" for k in itertools.count(1))):
                if candidate not in self.taken:
                    self.taken.add(candidate)
                    return candidate


_unique_name = UniqueNames().take      # Variables' shared names


class Variable:
    """Mutable state: a value of fixed dtype and shape that lives in a resource container under a shared
    name (the default container is shared by every graph, function and Session of the process; on a
    cluster task's device, in that task's process). In traced code `read_value()` / `assign` /
    `assign_add` / `assign_sub` are graph ops ordered in program order; outside a graph they read and
    change the current value at once (`numpy()`, `np.asarray(v)`). A lossy dtype or a wrong shape is a
    DfcError at the user's line."""
    def __init__(self, initial_value, name=None, dtype=None, shared_name=None, container="", device=None):
        if isinstance(initial_value, Tensor):
            raise DfcError("a Variable's initial value must be a concrete value (numpy array or Python number), "
                           "not a symbolic tensor", loc=user_location())
        where = getattr(_creation, "forbidden_in", None)
        if where is not None:
            raise DfcError(f"dfc.function {where} creates a dfc.Variable on a retrace (a new input signature): "
                           f"it would be a second Variable with fresh state. Create Variables outside the "
                           f"function, or only on its first call", loc=user_location())
        self.initial_value = np.array(const_array(initial_value, dtype))    # a copy the caller cannot change
        self.initial_value.flags.writeable = False
        self.name = name or "variable"
        self.shared_name = shared_name or _unique_name(self.name)
        self.container = container
        # Where the value lives: `device=`, else the `dfc.device` scope the Variable is made in; a device of
        # a cluster task ("ps:0/cpu:0") keeps the value in that task's process (numpy/assign go there).
        from dfc.compiler.api import python_device
        b = current_builder(required=False)
        self.device = device or (b.devices[-1] if b is not None and b.devices else python_device())
        if self._remote() is not None:
            return
        try:
            self._resource()  # created now, so numpy() and assign() work before any graph ran
        except DfcError as e:
            raise type(e)(e.message, loc=user_location()) from None

    @property
    def dtype(self):
        return self.initial_value.dtype.name

    @property
    def shape(self):
        return tuple(self.initial_value.shape)

    # ------------------------------------------------------------ outside any graph
    def _resource(self):
        return containers.get(self.container).variable(self.shared_name, lambda: self.initial_value)

    def _remote(self):
        """(cluster, task) when the value lives in a cluster task's process, else None."""
        if not self.device or "/" not in str(self.device):
            return None
        from dfc.runtime.devices import split_task
        from dfc.runtime.cluster import holding
        task = split_task(str(self.device))[0]
        c = holding(task)
        return None if c is None else (c, task)

    def numpy(self):
        """The current value (a copy) of this Variable in its container (on its cluster task if it has one)."""
        remote = self._remote()
        if remote is not None:
            c, task = remote
            v = c.read_variable(task, self.shared_name, self.container)
            return np.array(self.initial_value if v is None else v)
        v = self._resource().read()
        return v.get() if is_device_array(v) else np.array(v)

    def __array__(self, dtype=None, copy=None):
        v = self.numpy()
        return v if dtype is None else v.astype(dtype)

    def _eager_update(self, op, value):
        try:        # the conversions a graph input allows: only those that keep the values
            arr = convert_input(value.numpy() if isinstance(value, Variable) else value, self.dtype, self.shape,
                                self.name, what=f"{op} to variable")
        except DfcInputError as e:
            raise DfcTypeError(e.message, loc=user_location()) from None
        remote = self._remote()
        if remote is not None:
            c, task = remote
            return np.array(c.update_variable(task, self.shared_name, arr, op, self.initial_value, self.container))
        self._resource().assign(arr, op)
        return self.numpy()

    # ------------------------------------------------------------ in traced code
    def handle(self):
        b = current_builder()
        h = b.variables.get(id(self))
        if h is None or h.node not in b.graph.nodes:
            from dfc.compiler.control_deps import suspended
            with suspended(b):      # made once for the whole graph: it waits for no control_dependencies block
                init = b.make1("Const", (), {"value": self.initial_value}, ctx=None,
                               name=b.unique(f"{self.name}_init"))
                h = b.make1("VarHandle", (init,), {"shared_name": self.shared_name, "container": self.container},
                            ctx=None, name=b.unique(self.name))
            if self.device:     # the resource (and the nodes its handle flows to) on the Variable's device
                for t in (init, h):
                    b.graph.nodes[t.node].device = str(self.device)
            b.variables[id(self)] = h
        return h

    def read_value(self):
        """In traced code a ReadVariable node; outside any graph the current value (numpy)."""
        if current_builder(required=False) is None:
            return self.numpy()
        return current_builder().make1("ReadVariable", (self.handle(),),
                                       {"dtype": self.dtype, "shape": list(self.shape)})

    value = read_value

    def _dfc_tensor(self):
        return self.read_value()

    def _update(self, op, v):
        if current_builder(required=False) is None:
            return self._eager_update(op, v)
        v = convert(v, self.dtype)
        if v.shape is not None and not dt.shapes_compatible(v.shape, self.shape):
            raise DfcError(f"cannot {op} a value of shape {list(v.shape)} to variable {self.name!r} of shape "
                           f"{list(self.shape)}", loc=user_location())
        hook = getattr(update_hooks, "hook", None)
        if hook is not None:        # collected for one atomic ApplyOnce (dfc/compiler/data_parallel.py)
            return hook(self, op, v)
        return current_builder().make1(op, (self.handle(), v))

    def assign(self, v):
        return self._update("Assign", v)

    def assign_add(self, v):
        return self._update("AssignAdd", v)

    def assign_sub(self, v):
        return self._update("AssignSub", v)

    def scatter_add(self, indices, updates):
        """In traced code: `value[indices[i]] += updates[i]` for each i (duplicates add up in order), one
        atomic update of only those rows; returns the updated rows. Outside a graph, at once (numpy)."""
        return self._scatter("ResourceScatterAdd", indices, updates)

    def scatter_sub(self, indices, updates):
        """Like scatter_add, subtracting the rows."""
        return self._scatter("ResourceScatterSub", indices, updates)

    def _scatter(self, op, indices, updates):
        if current_builder(required=False) is None:      # at once: read, update the rows, assign
            idx = np.asarray(indices)
            new = self.numpy()
            np.add.at(new, idx, -np.asarray(updates, self.dtype) if op == "ResourceScatterSub" else
                      np.asarray(updates, self.dtype))
            return self._eager_update("Assign", new)[idx]
        if not self.shape:
            raise DfcError(f"variable {self.name!r} is a scalar: it has no rows to scatter to", loc=user_location())
        idx, upd = convert(indices), convert(updates, self.dtype)
        if idx.dtype not in dt.INTS:
            raise DfcTypeError(f"scatter indices must be int32/int64, got {idx.dtype}", loc=user_location())
        want = None if idx.shape is None else tuple(idx.shape) + self.shape[1:]
        if want is not None and upd.shape is not None and not dt.shapes_compatible(upd.shape, want):
            raise DfcError(f"cannot scatter rows of shape {list(upd.shape)} at indices of shape {list(idx.shape)} "
                           f"to variable {self.name!r} of shape {list(self.shape)}", loc=user_location())
        hook = getattr(update_hooks, "hook", None)
        if hook is not None:        # collected for one atomic ApplyOnce (dfc/compiler/data_parallel.py)
            return hook(self, op, (idx, upd))
        return current_builder().make1(op, (self.handle(), idx, upd))

    def __repr__(self):
        return f"<dfc.Variable {self.name!r} {self.dtype}{list(self.shape)}>"


def _fwd(name):
    def f(self, *args):
        return getattr(self.read_value(), name)(*args)
    return f


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__matmul__", "__rmatmul__", "__neg__", "__pow__", "__getitem__", "__lt__", "__gt__", "__le__",
            "__ge__"):
    setattr(Variable, _op, _fwd(_op))
Variable.__hash__ = object.__hash__
