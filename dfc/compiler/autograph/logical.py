"""and_/or_/not_ and chained comparisons: Python semantics on Python values, lazy dfc.cond on
tensors.

With a tensor on the left, the right side of `and`/`or` is traced inside the cond branch that
needs it (as in AutoGraph). Tracing it must not fail where Python would not evaluate it: an
error that depends on values (an index out of range, a missing key, a division by zero) becomes
an in-graph assertion, raised at run time only if that branch is taken.
"""
from dfc.compiler import control_flow, ops_api
from dfc.compiler.autograph import core
from dfc.compiler.autograph.origin import format_loc, map_frame
from dfc.errors import DfcError

# Errors of the values seen while tracing, not of the program (DfcIndexError is an IndexError).
DEFERRED_ERRORS = (LookupError, ArithmeticError)


def and_(*operands):
    """`a() and b() and ...`; on a tensor the rest is evaluated only in a cond branch."""
    value = operands[0]()
    rest = operands[1:]
    if not rest:
        return value
    if core.is_tensor(value):
        return control_flow.cond(value, lambda: lazy(lambda: and_(*rest), value), lambda: value)
    if not value:
        return value
    return and_(*rest)


def or_(*operands):
    """`a() or b() or ...`; on a tensor the rest is evaluated only in a cond branch."""
    value = operands[0]()
    rest = operands[1:]
    if not rest:
        return value
    if core.is_tensor(value):
        return control_flow.cond(value, lambda: value, lambda: lazy(lambda: or_(*rest), value))
    if value:
        return value
    return or_(*rest)


def not_(x):
    if core.is_tensor(x):
        return ops_api.logical_not(x if x.dtype == "bool" else x != 0)
    return not x


def compare_chain(first, *steps):
    """`a < b < c ...` with each operand evaluated once, left to right, and only while the
    comparisons so far hold. first: the thunk of `a`; steps: (thunk of the next operand,
    comparison of two values) pairs."""
    def from_(left, k):
        operand, compare = steps[k]
        right = operand()
        result = compare(left, right)
        if k + 1 == len(steps):
            return result
        return and_(lambda: result, lambda: from_(right, k + 1))
    return from_(first(), 0)


def lazy(fn, stand_in):
    """fn(), traced inside a cond branch that may never run.

    If tracing fails with an error that depends on values, what fn built is
    dropped and the branch instead fails at run time (an in-graph Assert);
    `stand_in` (a value like the other branch's) is returned in its place.
    """
    b = core.current_builder()
    mark = b.mark()
    try:
        return fn()
    except DEFERRED_ERRORS as e:
        b.rollback(mark)
        ops_api.Assert(False, message=_deferred_message(e))
        return stand_in


def _deferred_message(e):
    text = e.message if isinstance(e, DfcError) else str(e)
    loc = getattr(e, "loc", None) or _raised_at(e)
    return f"{loc + ': ' if loc else ''}{type(e).__name__}: {text}"


def _raised_at(e):
    """'file.py:N' of the innermost frame of user code that e passed through."""
    loc, tb = None, e.__traceback__
    while tb is not None:
        mapped = map_frame(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        if mapped is not None:
            loc = format_loc(mapped)
        tb = tb.tb_next
    return loc

