"""Process-wide settings of dfc (``dfc.config``).

Module-level state read by the compiler when a dfc.function is called. Kept
free of heavy imports so ``import dfc`` stays cheap.
"""
import math
import os

_TRUE = ("1", "true", "yes", "on")

_run_eagerly = os.environ.get("DFC_EAGER", "").strip().lower() in _TRUE


def run_functions_eagerly(enable):
    """Run every ``dfc.function`` as plain Python (``True``) or as graphs (``False``, the default).

    Eagerly, a dfc.function calls the user's function directly: no source
    conversion, no tracing. Tensor conditions of ``if``/``while`` are ordinary
    Python on numpy values, every dfc op computes at once on numpy, and
    ``dfc.cond``, ``dfc.while_loop``, ``dfc.TensorArray``, ``dfc.Variable``,
    ``dfc.print`` and ``dfc.Assert`` act immediately, so a debugger can step
    through the function and ``print`` shows real numbers. Results have the
    same nesting and dtypes as in graph mode. The environment variable
    ``DFC_EAGER=1`` sets the initial value when dfc is imported. Like
    TensorFlow's ``tf.config.run_functions_eagerly``; the setting is global,
    not per thread.
    """
    global _run_eagerly
    _run_eagerly = bool(enable)


def functions_run_eagerly():
    """Whether dfc.functions currently run eagerly (see ``run_functions_eagerly``)."""
    return _run_eagerly


# ---------------------------------------------------------------- default float dtype (issue 15 item 2)

_FLOATS = ("float32", "float64")


def _env_default_float():
    value = os.environ.get("DFC_DEFAULT_FLOAT", "").strip().lower() or "float32"
    if value not in _FLOATS:
        from dfc.errors import DfcError
        raise DfcError(f"DFC_DEFAULT_FLOAT={value!r}: use float32 or float64")
    return value


_default_float = _env_default_float()


def set_default_float(dtype):
    """Make ``dtype`` ("float32", the default, or "float64") the dtype dfc gives floats with no dtype.

    That is: a Python float on its own (``dfc.constant(1.5)``, a float loop variable ``s = 0.0``),
    lists of Python floats, ``zeros``/``ones``/``full``/``linspace``/``eye``-style constructors and
    random ops called without ``dtype=``, ``arange`` with float bounds, and the float that integer
    inputs of float-only ops (``dfc.softmax``) become. Python floats combined with a tensor still take
    the tensor's dtype (weak typing), and explicit dtypes are unchanged. Integers become float64 as in
    numpy, whatever this setting: a Python float combined with an integer tensor (an int64 input, or a
    counter ``t = 0`` of a loop) is float64, as are ``t / 2`` and ``dfc.cos(t)``; a value computed
    from Python scalars and counters only stays weakly typed, so where it meets a float32 tensor the
    result is float32 (float32 programs stay float32, float64 programs keep float64 precision). Like
    ``jax.config.update("jax_enable_x64", True)`` for scientific code that needs float64
    everywhere; the environment variable ``DFC_DEFAULT_FLOAT=float64`` sets the initial value.
    The setting is read while tracing: a graph keeps the dtypes it was traced with.
    """
    global _default_float
    name = getattr(dtype, "__name__", None) if isinstance(dtype, type) else None
    value = {"float": "float64"}.get(name, name) if name else str(getattr(dtype, "name", dtype))
    if value not in _FLOATS:
        from dfc.errors import DfcError
        raise DfcError(f"set_default_float({dtype!r}): use 'float32' or 'float64'")
    _default_float = value


def default_float():
    """The dtype name dfc gives floats with no dtype ("float32" unless set_default_float changed it)."""
    return _default_float


# ---------------------------------------------------------------- tracebacks of user errors

_TRACEBACKS = ("filtered", "full")


def _env_traceback():
    value = os.environ.get("DFC_TRACEBACK", "").strip().lower() or "filtered"
    if value not in _TRACEBACKS:
        from dfc.errors import DfcError
        raise DfcError(f"DFC_TRACEBACK={value!r}: use filtered or full")
    return value


_traceback = _env_traceback()


def set_traceback(mode):
    """How a DfcError's traceback looks when it leaves dfc: "filtered" (the default) drops the frames
    of dfc's own code, leaving the user's frames and the error (as JAX does); "full" keeps every
    frame, for debugging dfc itself. The environment variable ``DFC_TRACEBACK=full`` sets the
    initial value; the CLI's ``--debug`` uses "full" for its command."""
    global _traceback
    if mode not in _TRACEBACKS:
        from dfc.errors import DfcError
        raise DfcError(f"set_traceback({mode!r}): use 'filtered' or 'full'")
    _traceback = mode


def traceback_mode():
    """The traceback mode, "filtered" or "full" (see set_traceback)."""
    return _traceback


# ---------------------------------------------------------------- disk cache of compiled loops

def cache_dir():
    """The directory compiled loops are cached in: ``$DFC_CACHE_DIR``, else ``~/.cache/dfc``.

    Read at each call, so a program (or a test) may set the variable after ``import dfc``.
    dfc/runtime/compiled/cache.py uses it only if it is private to the user (see its docstring).
    """
    return os.environ.get("DFC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dfc")


# ---------------------------------------------------------------- cluster liveness

LIVENESS_ENV = "DFC_CLUSTER_LIVENESS_TIMEOUT"
DEFAULT_LIVENESS_TIMEOUT = 30.0


def parse_liveness_timeout(value=None):
    """Seconds a cluster task may go without answering the chief before it counts as dead: `value`
    (``dfc.cluster.connect(liveness_timeout=...)``), else ``$DFC_CLUSTER_LIVENESS_TIMEOUT``, else 30.
    A positive, finite number of seconds; anything else is a DfcError naming where it came from."""
    where = "liveness_timeout"
    if value is None:
        value = os.environ.get(LIVENESS_ENV, "").strip() or DEFAULT_LIVENESS_TIMEOUT
        where = LIVENESS_ENV
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        from dfc.errors import DfcError
        raise DfcError(f"{where}={value!r}: use a positive number of seconds (default "
                       f"{DEFAULT_LIVENESS_TIMEOUT:g})")
    return seconds
