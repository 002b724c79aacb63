"""Errors specific to source conversion (all are DfcError subclasses)."""
from dfc.errors import DfcConversionError, DfcTypeError


class DfcUndefinedVariableError(DfcConversionError):
    """A variable is used where it may not be defined (one branch, zero-trip loop)."""


class DfcLoopVariableError(DfcTypeError):
    """A loop variable changes structure or Python value between iterations."""


class DfcUnsupportedSyntaxError(DfcConversionError):
    """Syntax dfc.function cannot convert (yield, try around control flow, ...)."""


class DfcUnrolledLoopWarning(UserWarning):
    """A Python loop unrolled while tracing whose break/return depends on a tensor."""


class DfcTraceTimeRandomWarning(UserWarning):
    """numpy/Python random numbers drawn while tracing: constants of the graph."""


# Names the converter invents, and how to call them in messages.
INTERNAL_NAMES = {
    "retval_": "the return value",
    "do_return": "the early-return flag",
    "break_": "the break flag",
    "continue_": "the continue flag",
}


def describe(name):
    """A user-facing name for a (possibly converter-made) variable."""
    for internal, text in INTERNAL_NAMES.items():
        if name == internal or name.startswith(internal + "_"):
            return text
    return f"'{name}'"
