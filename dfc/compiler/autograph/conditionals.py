"""if_stmt and if_exp: Python `if` on Python values, dfc.cond on tensors."""
from dfc.compiler.autograph import core, state
from dfc.compiler.autograph.errors import DfcLoopVariableError, describe
from dfc.compiler.autograph.origin import generated_caller_location
from dfc.compiler.autograph.rollback import Mark


def if_stmt(cond, body, orelse, get_state, set_state, names, opts=None):
    """Equivalent to:

        if cond:
            body()
        else:
            orelse()

    where body/orelse update the variables `names` (read with get_state,
    written with set_state). On a tensor `cond` both branches are traced
    into a dfc.cond whose outputs are those variables.
    """
    if core.is_tensor(cond):
        return tensor_if(cond, body, orelse, get_state, set_state, names,
                         generated_caller_location())
    if cond:
        body()
    elif orelse is not None:
        orelse()


def if_exp(cond, if_true, if_false):
    """`if_true() if cond else if_false()`; a dfc.cond on a tensor `cond`."""
    if core.is_tensor(cond):
        return core.dfc().cond(cond, if_true, if_false)
    return if_true() if cond else if_false()


def tensor_if(cond, body, orelse, get_state, set_state, names, loc):
    init = get_state()
    fixed = None
    while True:
        mark = Mark()
        try:
            plans, outputs = _build_cond(cond, body, orelse, get_state, set_state, names, init,
                                         fixed, loc)
            break
        except state.Replan as replan:
            mark.rollback()
            fixed = replan.plans
    set_state(state.rebuild(plans, outputs))


def _build_cond(cond, body, orelse, get_state, set_state, names, init, fixed, loc):
    seen = {}

    def branch(fn, key):
        def run():
            set_state(init)
            if fn is not None:
                fn()
            values = list(get_state())
            plans = state.plans_for(names, values)
            if fixed is not None:
                for i, (f, p) in enumerate(zip(fixed, plans)):
                    if p.undefined and f.placeholder is not None:
                        values[i] = state.placeholder_from_spec(f.placeholder)
                plans = state.plans_for(names, values)
                for f, p in zip(fixed, plans):
                    state.check_compatible(f, p, loc, "cond")
                return tuple(state.dynamic_values(fixed, values))
            seen[key] = (values, plans)
            if key == "true":
                return tuple(state.dynamic_values(plans))
            true_values, true_plans = seen["true"]
            merged = [state.check_compatible(t, p, loc, "cond") for t, p in zip(true_plans, plans)]
            _check_dtypes(true_plans, plans, loc)
            if not all(state.same_plan(m, t) for m, t in zip(merged, true_plans)):
                raise state.Replan(merged)
            return tuple(state.dynamic_values(true_plans, values))
        return run

    outputs = core.dfc().cond(cond, branch(body, "true"), branch(orelse, "false"))
    plans = fixed if fixed is not None else seen["true"][1]
    return plans, _as_tuple(outputs)


def _check_dtypes(first, second, loc):
    for a, b in zip(first, second):
        if a.undefined or b.undefined:
            continue
        for x, y in zip(a.leaves, b.leaves):
            if core.is_tensor(x) and core.is_tensor(y) and x.dtype != y.dtype:
                raise DfcLoopVariableError(
                    f"{describe(a.name)} is {x.dtype} in one branch of this tensor `if` and "
                    f"{y.dtype} in the other; cast one of them (dfc.cast)", loc=loc)


def _as_tuple(outputs):
    if outputs is None:
        return ()
    if isinstance(outputs, (tuple, list)):
        return tuple(outputs)
    return (outputs,)
