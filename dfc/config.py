"""Process-wide settings of dfc (``dfc.config``).

Every ``DFC_*`` environment variable is declared here (``SETTINGS``: name, kind, default, meaning) and
read through ``env(name)``, which parses it by its kind with one rule per kind; no other module of dfc
reads a ``DFC_*`` variable (tests/test_settings.py checks). ``settings_table()`` renders the
declarations as the table of docs/settings.md. Also module-level
state read by the compiler when a dfc.function is called. Kept free of heavy imports so ``import dfc``
stays cheap.
"""
import math
import os

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class Setting:
    """One environment variable: its kind ("bool", "int", "float", "str", "choice", "path"), the value
    `env` gives when it is unset or empty, `when` it is read ("import": once, when its module is imported;
    "use": at each use, so a program may set it after ``import dfc``) and one line of meaning. `shown`:
    the default as the table shows it; `choices`: a choice's values (a bool may also take "auto" when
    `auto`); `valid`: (predicate, what) for a number."""

    def __init__(self, name, kind, default, when, doc, shown=None, choices=(), auto=False, valid=None):
        self.name, self.kind, self.default, self.when, self.doc = name, kind, default, when, doc
        self.shown = shown if shown is not None else _show(default)
        self.choices, self.auto, self.valid = choices, auto, valid


def _show(value):
    if isinstance(value, bool) or value is None:
        return {True: "on", False: "off", None: "unset"}[value]
    return f"{value:g}" if isinstance(value, float) else str(value)


_NON_NEGATIVE = (lambda n: n >= 0, "an integer >= 0")
_SECONDS = (lambda x: x > 0 and math.isfinite(x), "a positive number of seconds")

SETTINGS = {s.name: s for s in (
    Setting("DFC_EAGER", "bool", False, "import",
            "Run every dfc.function as plain Python (the initial value of `run_functions_eagerly`)."),
    Setting("DFC_DEFAULT_FLOAT", "choice", "float32", "import",
            "The dtype of floats with no dtype (the initial value of `set_default_float`).",
            choices=("float32", "float64")),
    Setting("DFC_TRACEBACK", "choice", "filtered", "import",
            "full keeps dfc's own frames in a DfcError's traceback (the initial value of `set_traceback`).",
            choices=("filtered", "full")),
    Setting("DFC_CACHE_DIR", "path", None, "use",
            "Directory of the disk cache of compiled loops (used only if private to the user).",
            shown="~/.cache/dfc"),
    Setting("DFC_CLUSTER_LIVENESS_TIMEOUT", "float", 30.0, "use",
            "Seconds a cluster task may go without answering the chief before it counts as dead.",
            valid=_SECONDS),
    Setting("DFC_EXECUTOR", "choice", "threads", "use",
            "A Session's mode when it gives none.", choices=("reference", "threads")),
    Setting("DFC_NUM_THREADS", "int", None, "use",
            "A Session's kernel pool size when it gives none (0 runs every kernel inline).",
            shown="the cores this process may use", valid=_NON_NEGATIVE),
    Setting("DFC_COMPILE_LOOPS", "bool", "auto", "use",
            "A Session's `compile_loops` when it gives none (auto: a run compiles to XLA in the "
            "background once it ran long enough; numba compiles the loop frames of runs XLA refuses).", auto=True),
    Setting("DFC_COMPILE_BUDGET", "float", math.inf, "import",
            "Seconds this process may spend compiling loops itself; past them new frames run fused."),
    Setting("DFC_COMPILE_ROOT", "bool", True, "import",
            "Compile a whole run (the root frame with its loops) into one function where it can."),
    Setting("DFC_COMPILED_FUSION", "bool", True, "import",
            "Compiled frames compute chains of elementwise ops in one loop (off: op by op)."),
    Setting("DFC_COMPILED_BUFFERS", "bool", True, "import",
            "Compiled frames reuse preallocated buffers for their values."),
    Setting("DFC_FOLD_CONSTANTS", "bool", True, "import",
            "Fold nodes whose inputs are all constants before a run."),
    Setting("DFC_CSE", "bool", True, "import",
            "Merge identical pure nodes (common subexpressions) before a run."),
    Setting("DFC_CHAINS", "bool", True, "use",
            "Chains of pure kernels in scheduled loop frames run as one kernel each."),
    Setting("DFC_FUSE_ELEMENTWISE", "bool", True, "use",
            "Fused frames on a GPU device group elementwise chains into one kernel."),
    Setting("DFC_BATCH_LOOP_GRADS", "bool", True, "use",
            "A loop's gradient of an invariant matmul operand is one matmul after the loop."),
    Setting("DFC_MALLOC_TUNING", "bool", True, "use",
            "Tune glibc's malloc to keep freed memory for the next step (once per process)."),
    Setting("DFC_PROGRESS", "bool", "auto", "use",
            "Progress bars of runs whose Session gives no `progress` (auto: when stderr is a terminal).",
            auto=True),
    Setting("DFC_SUMMARY_DIR", "path", None, "use",
            "Directory summaries of runs go to when neither the Session nor a default writer gives one."),
)}

# Variables of other tools that dfc reads or sets: name -> where and why (docs/settings.md lists them).
OTHER_VARIABLES = {
    "OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS":
        "read (dfc/runtime/overlap.py): how many threads numpy's BLAS uses, to decide whether loop "
        "iterations should overlap",
    "MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, GLIBC_TUNABLES":
        "read (dfc/runtime/host_memory.py): when they tune glibc's malloc, dfc leaves it as they say",
    "NUMBA_CACHE_DIR": "read by numba: where it caches compiled loops (dfc/runtime/compiled/cache.py "
                       "checks that directory is private too)",
    "RAY_TQDM_PATCH_PRINT": "set to 0 (dfc/runtime/cluster/__init__.py) unless already set, before Ray starts",
    "PYTHONPATH": "set for the child process that compiles loops in the background (this process's sys.path)",
}


def _fail(setting, raw, what):
    from dfc.errors import DfcError
    raise DfcError(f"{setting.name}={raw!r}: use {what} (default {setting.shown})")


def _read_bool(s, raw):
    value = raw.lower()
    if s.auto and value == "auto":
        return "auto"
    if value in TRUE or value in FALSE:
        return value in TRUE
    _fail(s, raw, "one of " + "/".join(TRUE) + " or " + "/".join(FALSE) + (" or auto" if s.auto else ""))


def _read_number(s, raw, convert):
    try:
        value = convert(raw)
    except ValueError:
        value = None
    if value is None or (s.valid is not None and not s.valid[0](value)):
        _fail(s, raw, s.valid[1] if s.valid else f"a number ({s.kind})")
    return value


def _read_choice(s, raw):
    value = raw.lower()
    if value not in s.choices:
        _fail(s, value, " or ".join(s.choices))
    return value


_READERS = {
    "bool": _read_bool,
    "int": lambda s, raw: _read_number(s, raw, int),
    "float": lambda s, raw: _read_number(s, raw, float),
    "str": lambda s, raw: raw,
    "choice": _read_choice,
    "path": lambda s, raw: raw,
}


def env(name, environ=None):
    """The value of the declared variable `name` in `environ` (default: this process's environment),
    parsed by its kind; its default when unset or empty (surrounding space ignored, except in a path);
    a value its kind does not accept is a DfcError naming the variable and what it accepts."""
    s = SETTINGS[name]
    raw = (os.environ if environ is None else environ).get(name, "")
    if s.kind != "path":
        raw = raw.strip()
    return _READERS[s.kind](s, raw) if raw else s.default


def _kind_text(s):
    if s.valid is not None:
        return s.valid[1]
    if s.kind == "choice":
        return " / ".join(s.choices)
    return "bool (1/true/yes/on, 0/false/no/off" + (", auto)" if s.auto else ")") if s.kind == "bool" else s.kind


def settings_table():
    """The Markdown table of every DFC_* variable (docs/settings.md holds it; tests/test_settings.py
    checks they agree)."""
    when = {"import": "at import", "use": "at each use"}
    rows = ["| Variable | Accepts | Default | Read | Meaning |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {_kind_text(s)} | {s.shown} | {when[s.when]} | {s.doc} |" for s in SETTINGS.values()]
    rows += ["", "| Other variable | Read or set by dfc |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in OTHER_VARIABLES.items()]
    return "\n".join(rows) + "\n"


_run_eagerly = env("DFC_EAGER")


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

_FLOATS = SETTINGS["DFC_DEFAULT_FLOAT"].choices


def _env_default_float():
    return env("DFC_DEFAULT_FLOAT")


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

_TRACEBACKS = SETTINGS["DFC_TRACEBACK"].choices


def _env_traceback():
    return env("DFC_TRACEBACK")


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
    return env("DFC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dfc")


# ---------------------------------------------------------------- cluster liveness

LIVENESS_ENV = "DFC_CLUSTER_LIVENESS_TIMEOUT"
DEFAULT_LIVENESS_TIMEOUT = SETTINGS[LIVENESS_ENV].default


def parse_liveness_timeout(value=None):
    """Seconds a cluster task may go without answering the chief before it counts as dead: `value`
    (``dfc.cluster.connect(liveness_timeout=...)``), else ``$DFC_CLUSTER_LIVENESS_TIMEOUT``, else 30.
    A positive, finite number of seconds; anything else is a DfcError naming where it came from."""
    if value is None:
        return env(LIVENESS_ENV)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    ok, what = SETTINGS[LIVENESS_ENV].valid       # the same rule as the environment variable's
    if not ok(seconds):
        from dfc.errors import DfcError
        raise DfcError(f"liveness_timeout={value!r}: use {what} (default {DEFAULT_LIVENESS_TIMEOUT:g})")
    return seconds
