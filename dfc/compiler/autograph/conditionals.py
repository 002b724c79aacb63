"""if_stmt and if_exp: Python `if` on Python values, dfc.cond on tensors."""
import numpy as np

from dfc import config
from dfc.errors import DfcError
from dfc.ir import dtypes
from dfc.compiler import control_flow, ops_api
from dfc.compiler.autograph import core, logical, state
from dfc.compiler.autograph.errors import DfcLoopVariableError, DfcUnsupportedSyntaxError
from dfc.compiler.autograph.origin import generated_caller_location


def if_stmt(cond, body, orelse, get_state, set_state, names, nouts=None):
    """Equivalent to:

        if cond:
            body()
        else:
            orelse()

    where body/orelse update the variables `names` (read with get_state,
    written with set_state). On a tensor `cond` both branches are traced
    into a dfc.cond whose outputs are the first `nouts` of those variables
    (default: all); each branch starts from the values before the `if`.
    """
    if core.is_tensor(cond):
        return tensor_if(cond, body, orelse, get_state, set_state, names,
                         generated_caller_location(), nouts)
    if cond:
        body()
    elif orelse is not None:
        orelse()


def if_exp(cond, if_true, if_false):
    """`if_true() if cond else if_false()`; a dfc.cond on a tensor `cond`.

    A side whose tracing fails on the values it sees (logical.lazy) fails at
    run time instead, only if it is taken; it is traced after the other side,
    so it can stand in with zeros shaped like that side's value.
    """
    if not core.is_tensor(cond):
        return if_true() if cond else if_false()
    seen = []

    def first(fn):
        def run():
            seen.append(fn())
            return seen[-1]
        return run

    def second(fn):
        return lambda: logical.lazy(fn, state.placeholder_from_spec(state.placeholder_spec(seen[-1])))

    b = core.current_builder()
    mark = b.mark()
    try:
        return control_flow.cond(cond, first(if_true), second(if_false))
    except logical.DEFERRED_ERRORS:  # from if_true: trace if_false first
        b.rollback(mark)
    return control_flow.cond(logical.not_(cond), first(if_false), second(if_true))


def not_tensor_in_try(value, kind):
    """value, the test of an `if`/`while` or the iterable of a `for` in a `try` body, where it
    must not build an in-graph cond or loop."""
    from dfc.compiler.autograph import iterables
    if core.is_tensor(value) or (kind == "for" and iterables.is_tensor_iterable(value)):
        raise DfcUnsupportedSyntaxError(
            f"this `{kind}` depends on a tensor inside a `try` block: it becomes an in-graph "
            f"{'cond' if kind == 'if' else 'loop'} whose errors happen when the graph runs, where "
            f"the `except` cannot catch them; move the `{kind}` out of the `try` (or the `try` "
            f"out of the dfc.function)", loc=generated_caller_location())
    return value


def tensor_if(cond, body, orelse, get_state, set_state, names, loc, nouts=None):
    init = tuple(get_state())
    nouts = len(names) if nouts is None else nouts
    fixed, casts = None, {}
    b = core.current_builder()
    for _attempt in range(2):    # the second trace has the plans and casts of both branches
        mark = b.mark()
        try:
            plans, outputs = _build_cond(cond, body, orelse, get_state, set_state, names[:nouts],
                                         init, fixed, casts, loc)
            break
        except state.Replan as replan:
            b.rollback(mark)
            fixed, casts = replan.plans, replan.casts
    else:
        raise DfcError("internal: the plan of this tensor `if` did not settle after two traces", loc=loc)
    # the inputs-only variables are dead here; they get their values from before the `if`
    # rather than tensors of the branch traced last
    set_state(state.rebuild(plans, outputs) + init[nouts:])


def _build_cond(cond, body, orelse, get_state, set_state, names, init, fixed, casts, loc):
    seen = {}

    def branch(fn, key):
        def run():
            set_state(_fresh_lists(init))
            if fn is not None:
                fn()
            values = list(get_state())[:len(names)]
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
            _, true_plans = seen["true"]
            merged = [state.check_compatible(t, p, loc, "cond") for t, p in zip(true_plans, plans)]
            if not all(state.same_plan(m, t) for m, t in zip(merged, true_plans)):
                raise state.Replan(merged, _unify(seen["true_dynamic"],
                                                  state.dynamic_values(true_plans, values),
                                                  true_plans, loc))
            mine = state.dynamic_values(true_plans, values)
            needed = _unify(seen["true_dynamic"], mine, true_plans, loc)
            if any(_needs_cast(seen["true_dynamic"][k], d) for k, d in needed.items()):
                raise state.Replan(true_plans, needed)
            return _cast(mine, needed)
        return run

    outputs = control_flow.cond(cond, branch(body, "true"), branch(orelse, "false"))
    plans = fixed if fixed is not None else seen["true"][1]
    return plans, _as_tuple(outputs)


def _unify(first, second, plans, loc):
    """{dynamic leaf index: dtype} where the branches' dtypes differ and one side must be cast.

    A weakly typed value (a Python scalar, or a tensor made only from them) takes the other
    branch's dtype, as it would in arithmetic; two strongly typed values of different dtypes
    are an error, as in TF and JAX.
    """
    needed = {}
    for k, (x, y) in enumerate(zip(first, second)):
        kx, ky = _typing(x), _typing(y)
        if None in (kx, ky) or kx[0] == ky[0] or kx[1] == ky[1] == "python":
            continue
        (dx, wx), (dy, wy) = kx, ky
        if "python" in (wx, wy):
            continue  # dfc.cond gives a Python scalar the other side's dtype, or casts that side
        if "bool" in (dx, dy) or wx == wy == "strong":
            name = state.dynamic_names(plans)[k]
            raise DfcLoopVariableError(
                f"'{name}' is {dx} when the condition of this tensor `if` is true and {dy} when "
                f"it is false; cast one of them (dfc.cast) so both branches give the same dtype",
                loc=loc)
        if wx == wy:
            needed[k] = dtypes.promote(dx, dy)
        else:  # the weak side takes the strong side's dtype, unless that drops a fraction
            weak_dtype, strong_dtype = (dx, dy) if wx == "weak" else (dy, dx)
            needed[k] = ("float64" if dtypes.is_float(weak_dtype) and not dtypes.is_float(strong_dtype)
                         else strong_dtype)
    return needed


def _typing(x):
    """(dtype, 'python' | 'weak' | 'strong') of a branch output leaf, None if it has no dtype."""
    if core.is_tensor(x):
        return x.dtype, "weak" if x.weak else "strong"
    if isinstance(x, (np.generic, np.ndarray)):  # before float: np.float64 is a float
        return np.dtype(x.dtype).name, "strong"
    if isinstance(x, bool):
        return "bool", "python"
    if isinstance(x, int):
        return "int64", "python"
    if isinstance(x, float):
        return config.default_float(), "python"
    return None


def _needs_cast(x, dtype):
    return core.is_tensor(x) and x.dtype != dtype


def _cast(values, casts):
    out = list(values)
    for k, dtype in casts.items():
        if core.is_tensor(out[k]) and out[k].dtype != dtype:
            out[k] = ops_api.cast(out[k], dtype)
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
