"""if_stmt and if_exp: Python `if` on Python values, dfc.cond on tensors."""
from dfc.compiler.autograph import core, state
from dfc.compiler.autograph.errors import DfcLoopVariableError
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
    fixed, casts = None, {}
    while True:
        mark = Mark()
        try:
            plans, outputs = _build_cond(cond, body, orelse, get_state, set_state, names, init,
                                         fixed, casts, loc)
            break
        except state.Replan as replan:
            mark.rollback()
            fixed, casts = replan.plans, replan.casts
    set_state(state.rebuild(plans, outputs))


def _build_cond(cond, body, orelse, get_state, set_state, names, init, fixed, casts, loc):
    seen = {}

    def branch(fn, key):
        def run():
            set_state(_fresh_lists(init))
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
                return _cast(state.dynamic_values(fixed, values), casts)
            seen[key] = (values, plans)
            if key == "true":
                seen["true_dynamic"] = state.dynamic_values(plans)
                return tuple(seen["true_dynamic"])
            true_values, true_plans = seen["true"]
            merged = [state.check_compatible(t, p, loc, "cond") for t, p in zip(true_plans, plans)]
            if not all(state.same_plan(m, t) for m, t in zip(merged, true_plans)):
                raise state.Replan(merged, _unify(seen["true_dynamic"],
                                                  state.dynamic_values(true_plans, values),
                                                  true_plans, loc))
            mine = state.dynamic_values(true_plans, values)
            needed = _unify(seen["true_dynamic"], mine, true_plans, loc)
            if any(seen["true_dynamic"][k].dtype != d for k, d in needed.items()):
                raise state.Replan(true_plans, needed)
            return _cast(mine, needed)
        return run

    outputs = core.dfc().cond(cond, branch(body, "true"), branch(orelse, "false"))
    plans = fixed if fixed is not None else seen["true"][1]
    return plans, _as_tuple(outputs)


def _unify(first, second, plans, loc):
    """{dynamic leaf index: dtype} where the branches' dtypes differ and must be promoted."""
    from dfc.ir import dtypes
    needed = {}
    for k, (x, y) in enumerate(zip(first, second)):
        if core.is_tensor(x) and core.is_tensor(y) and x.dtype != y.dtype:
            if "bool" in (x.dtype, y.dtype):
                name = state.dynamic_names(plans)[k]
                raise DfcLoopVariableError(
                    f"'{name}' is {x.dtype} in one branch of this tensor `if` and {y.dtype} in the "
                    f"other; cast one of them (dfc.cast)", loc=loc)
            needed[k] = dtypes.promote(x.dtype, y.dtype)
    return needed


def _cast(values, casts):
    out = list(values)
    for k, dtype in casts.items():
        if core.is_tensor(out[k]) and out[k].dtype != dtype:
            out[k] = core.dfc().cast(out[k], dtype)
    return tuple(out)


def _fresh_lists(values):
    """Copies of the lists in `values`, so an append in one branch is not seen by the other."""
    def copy(v):
        if isinstance(v, list):
            return [copy(x) for x in v]
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            return tuple(copy(x) for x in v)
        if type(v) is dict:
            return {k: copy(x) for k, x in v.items()}
        return v
    return tuple(copy(v) for v in values)


def _as_tuple(outputs):
    if outputs is None:
        return ()
    if isinstance(outputs, (tuple, list)):
        return tuple(outputs)
    return (outputs,)
