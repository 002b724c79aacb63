"""dfc.Variable: state that lives in the runtime and persists across runs of a graph.

A Variable may be created outside any trace; each graph that uses it gets one
VarHandle node (at the top level, never inside a loop or branch) initialised
from the initial value on the graph's first run.
"""
import itertools

from dfc.errors import DfcError
from dfc.ir import dtypes as dt
from dfc.compiler.tracing import Tensor, convert, const_array, current_builder, user_location

_ids = itertools.count()


class Variable:
    def __init__(self, initial_value, name=None, dtype=None):
        if isinstance(initial_value, Tensor):
            raise DfcError("a Variable's initial value must be a concrete value (numpy array or Python number), "
                           "not a symbolic tensor", loc=user_location())
        self.initial_value = const_array(initial_value, dtype)
        self.name = name or "variable"
        self.shared_name = f"{self.name}_{next(_ids)}"

    @property
    def dtype(self):
        return self.initial_value.dtype.name

    @property
    def shape(self):
        return tuple(self.initial_value.shape)

    def handle(self):
        b = current_builder()
        h = b.variables.get(id(self))
        if h is None or h.node not in b.graph.nodes:
            init = b.make1("Const", (), {"value": self.initial_value}, ctx=None,
                           name=b.unique(f"{self.name}_init"))
            h = b.make1("VarHandle", (init,), {"shared_name": self.shared_name}, ctx=None,
                        name=b.unique(self.name))
            b.variables[id(self)] = h
        return h

    def read_value(self):
        return current_builder().make1("ReadVariable", (self.handle(),),
                                       {"dtype": self.dtype, "shape": list(self.shape)})

    value = read_value

    def _dfc_tensor(self):
        return self.read_value()

    def _update(self, op, v):
        v = convert(v, self.dtype)
        if v.shape is not None and not dt.shapes_compatible(v.shape, self.shape):
            raise DfcError(f"cannot {op} a value of shape {list(v.shape)} to variable {self.name!r} of shape "
                           f"{list(self.shape)}", loc=user_location())
        return current_builder().make1(op, (self.handle(), v))

    def assign(self, v):
        return self._update("Assign", v)

    def assign_add(self, v):
        return self._update("AssignAdd", v)

    def assign_sub(self, v):
        return self._update("AssignSub", v)

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
