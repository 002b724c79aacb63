"""Variables that may have no value at run time: first set inside a tensor loop.

    while i < n:
        last = i          # Python: `last` exists after the loop only if it ran
        i += 1
    return last

As in TF, the loop carries `last` (starting from zeros) and a boolean "is
set" flag (False, then True after an iteration sets it). After the loop,
`last` is checked when it is used: if the flag is False, a DfcAssertionError
names the variable. A loop inside another one carries the outer loop's flag
on, so `last` set in an inner loop that runs zero times is caught too.

The flag of each such tensor is kept in the builder (`maybe_unset`, keyed by
the tensor object), where nested loops and the enclosing loop body find it.
"""
from dfc import nest
from dfc.compiler import ops_api
from dfc.compiler.autograph import core


def _registry():
    return core.current_builder().maybe_unset


def mark(value, flag):
    """Record that the tensors in `value` have a value only where `flag` is true."""
    reg = _registry()
    for leaf in nest.flatten(value):
        if core.is_tensor(leaf):
            reg[id(leaf)] = (leaf, flag)


def registered_flag(value):
    """The flag of a value that may have no value, or None if it certainly has one."""
    reg = _registry()
    flags = [reg[id(leaf)][1] for leaf in nest.flatten(value)
             if core.is_tensor(leaf) and id(leaf) in reg]
    if not flags:
        return None
    out = flags[0]
    for f in flags[1:]:
        if f is not out:
            out = ops_api.logical_and(out, f)
    return out


def flag_of(value):
    flag = registered_flag(value)
    return flag if flag is not None else ops_api.constant(True)


def with_flag(get_state, set_state, index):
    """get/set_state of a loop that also carries the "is set" flag of variable `index`."""
    def get():
        values = tuple(get_state())
        return values + (flag_of(values[index]),)

    def set_(values):
        set_state(tuple(values[:-1]))
        mark(values[index], values[-1])

    return get, set_


def guarded(value, flag, name, loc):
    """`value` after the loop, checked when used: its flag must be true."""
    from dfc.compiler.ops_api import checked_when_used
    message = (f"{name} is used but has no value: it is first set inside the tensor loop at "
               f"{loc}, which ran zero times (Python raises UnboundLocalError); give {name} a "
               f"value before the loop")

    def guard(leaf):
        if not core.is_tensor(leaf):
            return leaf
        return checked_when_used(leaf, flag, message)
    out = nest.map_structure(guard, value) if nest.is_nested(value) else guard(value)
    mark(out, flag)
    return out
