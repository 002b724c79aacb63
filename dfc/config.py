"""Process-wide settings of dfc (``dfc.config``).

Module-level state read by the compiler when a dfc.function is called. Kept
free of heavy imports so ``import dfc`` stays cheap.
"""
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
