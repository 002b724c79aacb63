"""and_/or_/not_: Python semantics on Python values, lazy dfc.cond on tensors."""
from dfc.compiler.autograph import core


def and_(*operands):
    """`a() and b() and ...`; on a tensor the rest is evaluated only in a cond branch."""
    value = operands[0]()
    rest = operands[1:]
    if not rest:
        return value
    if core.is_tensor(value):
        return core.dfc().cond(value, lambda: and_(*rest), lambda: value)
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
        return core.dfc().cond(value, lambda: value, lambda: or_(*rest))
    if value:
        return value
    return or_(*rest)


def not_(x):
    if core.is_tensor(x):
        dfc = core.dfc()
        return dfc.logical_not(x if x.dtype == "bool" else x != 0)
    return not x
