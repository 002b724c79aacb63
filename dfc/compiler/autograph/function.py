"""dfc.function: convert a Python function once, trace it per signature, run the graph.

    @dfc.function
    def f(x, n): ...

    f(np.float32(2.0), np.int32(5))   # numpy arrays/scalars are graph inputs
    f(2.0, 5)                         # Python values are static (part of the cache key)
    f.trace(dfc.TensorSpec([], "float32"), dfc.TensorSpec([], "int32"))  # -> dfc.Graph
    f.code                            # the converted source
"""
import functools
import inspect
import threading
import warnings

import numpy as np

from dfc import config, nest
from dfc.errors import DfcInputError
from dfc.traceback_filter import api_boundary
from dfc.compiler import eager, variables
from dfc.compiler.autograph import conversion, core, parser
from dfc.compiler.autograph.errors import DfcUndefinedVariableError, DfcUnsupportedSyntaxError
from dfc.compiler.autograph.special_values import Undefined, UndefinedReturnValue
from dfc.compiler.autograph.tensor_list import TensorList

_trace_lock = threading.RLock()


def function(fn=None, *, input_signature=None):
    """Decorator: `@dfc.function` or `@dfc.function(input_signature=[dfc.TensorSpec(...), ...])`."""
    if fn is None:
        return lambda f: Function(f, input_signature)
    return Function(fn, input_signature)


class Function:
    """A Python function that runs as a dataflow graph (one trace per input signature)."""

    def __init__(self, python_function, input_signature=None, _instance=None, _cache=None):
        if isinstance(python_function, Function):
            python_function = python_function.python_function
        functools.update_wrapper(self, python_function)
        self.python_function = python_function
        self.input_signature = None if input_signature is None else list(input_signature)
        self._instance = _instance
        self._cache = {} if _cache is None else _cache
        self._signature = inspect.signature(python_function)
        # Calls whose every parameter gets an array positionally find their graph by the arrays' shapes
        # and dtypes alone (the key the general path builds from them, without building it): a call's
        # own cost matters when the graph runs compiled in tens of microseconds.
        kinds = [q.kind for q in self._signature.parameters.values()]
        self._arity = len(kinds) if input_signature is None and _instance is None and all(
            k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds) else -1
        self._by_arrays = {}

    # ------------------------------------------------------------ conversion
    def converted_python_function(self):
        """The converted function (bound to the instance for methods)."""
        fn = self.python_function
        if inspect.isgeneratorfunction(fn):
            _, filename, offset = parser.function_source(fn)
            raise DfcUnsupportedSyntaxError(
                f"`yield` is not supported in dfc.function ({fn.__qualname__} is a generator); "
                f"return a list or use dfc.TensorArray instead",
                loc=f"{filename}:{_first_yield_line(fn, offset)}")
        try:
            converted = conversion.convert(fn)
        except parser.SourceUnavailable as e:
            warnings.warn(f"dfc.function cannot read the source of {fn.__qualname__} ({e}); it is "
                          f"traced without conversion, so `if`/`while` on tensors will fail. "
                          f"Define it in a file to convert it.", stacklevel=3)
            converted = fn
        if self._instance is not None:
            return converted.__get__(self._instance)
        return converted

    @property
    def code(self):
        """The converted source of the function, as readable Python, followed by that of every
        user function it calls (converted too)."""
        return conversion.source_with_callees(self.python_function)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return Function(self.python_function, self.input_signature, _instance=instance,
                        _cache=self._cache)

    # ------------------------------------------------------------ calling
    @api_boundary
    def __call__(self, *args, **kwargs):
        if core.current_builder() is not None:
            return self.converted_python_function()(*args, **kwargs)
        if config.functions_run_eagerly():
            return self._call_eagerly(args, kwargs)
        key = _arrays_key(args) if len(args) == self._arity and not kwargs else None
        graph = self._by_arrays.get(key) if key is not None else None
        if graph is not None:
            return graph(*args)
        graph, inputs = self.concrete(*args, **kwargs)
        if key is not None:
            self._by_arrays[key] = graph
        return graph(*inputs)

    def _call_eagerly(self, args, kwargs):
        """dfc.config.run_functions_eagerly: the Python function itself (not converted, not traced)
        on the numpy arguments; the results as the graph would give them."""
        call_args, call_kwargs = self._bind(args, kwargs)
        if self.input_signature is not None:
            params = list(self._signature.parameters)
            offset = 1 if self._instance is not None else 0
            for k, spec in enumerate(self.input_signature[:len(call_args) - offset]):
                i = k + offset
                call_args[i] = _convert_input(call_args[i], spec, params[i] if i < len(params) else f"arg{i}")
        return eager.run_function(self.python_function, call_args, call_kwargs, self.__name__)

    @api_boundary
    def concrete(self, *args, **kwargs):
        """(the Graph a call with these arguments runs, its flat input values): `f(*args)` is
        `graph(*inputs)`. Traces on the first call with a new signature, like a call."""
        call_args, call_kwargs = self._bind(args, kwargs)
        key, trace_args, trace_kwargs, inputs = self._prepare(call_args, call_kwargs, values=True)
        return self._graph(key, trace_args, trace_kwargs), inputs

    @api_boundary
    def trace(self, *args, **kwargs):
        """The Graph for these TensorSpecs (graph inputs) and Python values (static)."""
        if self.input_signature is not None and not args and not kwargs:
            args = tuple(self.input_signature)
        call_args, call_kwargs = self._bind(args, kwargs)
        key, trace_args, trace_kwargs, _ = self._prepare(call_args, call_kwargs, values=False)
        return self._graph(key, trace_args, trace_kwargs)

    def _bind(self, args, kwargs):
        if self._instance is not None:
            args = (self._instance,) + tuple(args)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise DfcInputError(f"{self.__name__}(): {e}") from None
        bound.apply_defaults()
        return list(bound.args), dict(bound.kwargs)

    def _prepare(self, args, kwargs, values):
        """(cache key, args for tracing, kwargs for tracing, flat input values)."""
        params = list(self._signature.parameters)
        offset = 1 if self._instance is not None else 0
        key, trace_args, inputs = [], [], []
        for i, value in enumerate(args):
            pname = params[i] if i < len(params) else f"arg{i}"
            spec = None
            if self.input_signature is not None and offset <= i < offset + len(self.input_signature):
                spec = self.input_signature[i - offset]
                if values:
                    value = _convert_input(value, spec, pname)
            if i < offset:
                key.append(("self", _static_key(value)))
                trace_args.append(value)
                continue
            k, traced, flat = _classify(value, pname, spec)
            key.append(k)
            trace_args.append(traced)
            inputs.extend(flat)
        trace_kwargs = {}
        for name, value in kwargs.items():
            k, traced, flat = _classify(value, name, None)
            key.append((name, k))
            trace_kwargs[name] = traced
            inputs.extend(flat)
        return tuple(key), trace_args, trace_kwargs, inputs

    def _graph(self, key, trace_args, trace_kwargs):
        entry = self._cache.get(key)
        if entry is None:
            with _trace_lock:            # concurrent first calls trace once and share the graph
                entry = self._cache.get(key)
                if entry is None:
                    return self._trace_new(key, trace_args, trace_kwargs)
        return entry[0]

    def _trace_new(self, key, trace_args, trace_kwargs):
        converted = self.converted_python_function()
        if self._instance is not None:
            converted = converted.__func__

        @functools.wraps(self.python_function)
        def traced(*a, **k):
            return _finish_outputs(converted(*a, **k))

        if self._instance is not None:
            traced_fn = functools.partial(traced, self._instance)
            functools.update_wrapper(traced_fn, self.python_function)
            traced_fn.__wrapped__ = _drop_first_param(self.python_function)
            fn, args = traced_fn, trace_args[1:]
        else:
            fn, args = traced, trace_args
        # As in tf.function: Variables may be created on the first trace only; a retrace that made
        # new ones would silently start from fresh state.
        with variables.creation_allowed(not self._cache, self.__qualname__):
            graph = core.trace(fn, args, trace_kwargs, self.__name__)
        # keep the arguments alive: identity-keyed statics must not be reused
        self._cache[key] = (graph, trace_args)
        return graph

    def __repr__(self):
        return f"<dfc.function {self.__qualname__}>"


# ---------------------------------------------------------------- arguments
def _arrays_key(args):
    """(shape, dtype) of each argument when every one is a numpy array or scalar (each then one graph
    input, as _classify makes it), else None."""
    key = []
    for a in args:
        if not _is_input(a):
            return None
        key.append((a.shape, a.dtype))
    return tuple(key)


def _is_input(value):
    return isinstance(value, (np.ndarray, np.generic)) and not isinstance(value, (np.str_, np.bytes_))


def _classify(value, pname, spec):
    """(key, value for tracing, flat numpy inputs) of one argument."""
    from dfc.compiler.tracing import TensorSpec
    if isinstance(value, TensorSpec):
        spec = TensorSpec(value.shape, value.dtype, value.name or pname)
        return ("T", spec.dtype, spec.shape), spec, []
    if _is_input(value):
        arr = np.asarray(value)
        spec = TensorSpec(arr.shape if spec is None or spec.shape is None else spec.shape,
                          arr.dtype.name if spec is None else spec.dtype, pname)
        return ("T", spec.dtype, spec.shape), spec, [arr]
    if isinstance(value, (list, tuple, dict)) and any(
            _is_input(v) or isinstance(v, TensorSpec) for v in nest.flatten(value)):
        flat = nest.flatten(value)
        keys, specs, arrays = [], [], []
        for i, leaf in enumerate(flat):
            k, traced, arr = _classify(leaf, f"{pname}_{i}", None)
            keys.append(k)
            specs.append(traced)
            arrays.extend(arr)
        return ("N", _structure_key(value), tuple(keys)), nest.pack_sequence_as(value, specs), arrays
    return ("S", _static_key(value)), value, []


def _structure_key(value):
    if isinstance(value, dict):
        return ("dict", tuple((k, _structure_key(v)) for k, v in sorted(value.items(), key=repr)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_structure_key(v) for v in value))
    return None


def _static_key(value):
    """Static arguments are compared by value when hashable (or built of hashables), else by identity."""
    if isinstance(value, (list, tuple)):
        try:
            return (type(value), tuple(_static_key(v) for v in value))
        except _Unhashable:
            return ("id", id(value))
    if isinstance(value, dict):
        try:
            return (dict, tuple(sorted(((_static_key(k), _static_key(v)) for k, v in value.items()),
                                       key=repr)))
        except _Unhashable:
            return ("id", id(value))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value), value)


class _Unhashable(Exception):
    pass


def _convert_input(value, spec, pname):
    """value as an array of the signature's dtype, or DfcInputError if that loses information."""
    from dfc.compiler.tracing import TensorSpec
    if isinstance(value, TensorSpec):
        return value
    arr = np.asarray(value)
    if spec.shape is not None:
        if arr.ndim != len(spec.shape):
            raise DfcInputError(f"argument '{pname}' has shape {arr.shape} but the input_signature "
                                f"says {spec!r} (rank {len(spec.shape)})")
        for have, want in zip(arr.shape, spec.shape):
            if want is not None and have != want:
                raise DfcInputError(f"argument '{pname}' has shape {arr.shape} but the "
                                    f"input_signature says {spec!r}")
    target = np.dtype(spec.dtype)
    if arr.dtype != target:
        if not _lossless(arr, target):
            raise DfcInputError(f"argument '{pname}' is {arr.dtype}; converting it to {spec.dtype} "
                                f"(the input_signature) would change its values")
        arr = arr.astype(target)
    return arr


def _lossless(arr, target):
    kind, to = arr.dtype.kind, target.kind
    if kind == "b":
        return True
    if kind in "iu":
        if to in "fc":
            return True
        if to in "iu":
            return bool(np.array_equal(arr.astype(target).astype(arr.dtype), arr))
        return False
    if kind == "f":
        return to in "fc"
    if kind == "c":
        return to == "c"
    return False


# ---------------------------------------------------------------- results
def _finish_outputs(value):
    def fix(x):
        if isinstance(x, TensorList):
            return x.stack()
        if core.is_tensor_array(x):
            return x.stack()
        if isinstance(x, Undefined):
            raise DfcUndefinedVariableError(
                f"the function returns variable '{x.name}', which is not defined on every path")
        if isinstance(x, UndefinedReturnValue):
            return None
        return x
    if isinstance(value, (list, tuple, dict)):
        return nest.map_structure(fix, value)
    return fix(value)


def _drop_first_param(fn):
    """A stand-in whose signature is fn's without `self` (for placeholder names)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]

    def stand_in(*args, **kwargs):
        raise AssertionError("not called")
    stand_in.__signature__ = sig.replace(parameters=params)
    return stand_in


def _first_yield_line(fn, offset):
    import gast
    try:
        node = parser.parse_function(fn)
    except parser.SourceUnavailable:
        return offset + 1
    for n in gast.walk(node):
        if isinstance(n, (gast.Yield, gast.YieldFrom)):
            return n._dfc_origin[1]
    return offset + 1
