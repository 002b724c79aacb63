"""while_stmt and for_stmt: Python loops on Python values, dfc.while_loop on tensors."""
import warnings

from dfc.compiler.autograph import core, iterables, state
from dfc.compiler.autograph.conditionals import tensor_if
from dfc.compiler.autograph.errors import DfcLoopVariableError, describe
from dfc.compiler.autograph.origin import generated_caller_location
from dfc.compiler.autograph.rollback import Mark
from dfc.compiler.autograph.tensor_list import ElementTypeNeeded, TensorList

UNROLL_WARNING = 10000


def while_stmt(test, body, get_state, set_state, names, opts=None):
    """Equivalent to `while test(): body()`.

    A tensor test (now or after some Python iterations, e.g. `while True:`
    with a break on a tensor condition) makes the rest of the loop a
    dfc.while_loop over the variables `names`.
    """
    loc = generated_caller_location()
    cond = test()
    count = 0
    while True:
        if core.is_tensor(cond):
            return tensor_while(test, body, get_state, set_state, names, opts, loc)
        if not cond:
            return
        body()
        count += 1
        _warn_unrolled(count, loc)
        cond = test()


def for_stmt(iter_, extra_test, body, get_state, set_state, names, opts=None):
    """Equivalent to:

        for item in iter_:
            if extra_test is not None and not extra_test():
                break
            body(item)

    Over a tensor, TensorArray, a range with tensor bounds (or enumerate/zip
    of those) this is a dfc.while_loop with an iteration counter. Over Python
    iterables the loop is unrolled; once extra_test (a break/return flag)
    becomes a tensor, each remaining iteration runs under a dfc.cond.
    """
    loc = generated_caller_location()
    iteration = iterables.tensor_iteration(iter_)
    if iteration is not None:
        return _tensor_for(iteration, extra_test, body, get_state, set_state, names, opts, loc)
    count = 0
    for item in iter_:
        if extra_test is not None:
            go_on = extra_test()
            if core.is_tensor(go_on):
                tensor_if(go_on, lambda item=item: body(item), None, get_state, set_state,
                          names, loc)
                continue
            if not go_on:
                break
        body(item)
        count += 1
        _warn_unrolled(count, loc)


def _warn_unrolled(count, loc):
    if count == UNROLL_WARNING + 1:
        warnings.warn(f"{loc}: a Python loop has been unrolled more than {UNROLL_WARNING} times "
                      f"while tracing; loop over a tensor (dfc.range, or range() of a tensor) "
                      f"to build an in-graph loop instead", stacklevel=3)


def _tensor_for(iteration, extra_test, body, get_state, set_state, names, opts, loc):
    dfc = core.dfc()
    box = [dfc.constant(0, dtype=iteration.counter_dtype)]

    def get():
        return (box[0],) + tuple(get_state())

    def set_(values):
        box[0] = values[0]
        set_state(tuple(values[1:]))

    def test():
        go_on = box[0] < iteration.length
        if extra_test is not None:
            more = extra_test()
            if core.is_tensor(more):
                go_on = dfc.logical_and(go_on, more)
            elif not more:
                go_on = dfc.logical_and(go_on, False)
        return go_on

    def loop_body():
        i = box[0]
        body(iteration.get(i))
        box[0] = i + 1

    return tensor_while(test, loop_body, get, set_, ("<iteration counter>",) + tuple(names),
                        opts, loc)


def tensor_while(test, body, get_state, set_state, names, opts, loc):
    init = list(get_state())
    lists = set((opts or {}).get("lists", ()))
    for i, name in enumerate(names):
        if name in lists and isinstance(init[i], list):
            init[i] = TensorList.from_list(init[i])
    while True:
        mark = Mark()
        try:
            plans, outputs = _build_loop(test, body, get_state, set_state, names, init, loc)
            break
        except state.Replan as replan:
            mark.rollback()
            for i, plan in enumerate(replan.plans):
                if plan.placeholder is not None:
                    init[i] = state.placeholder_from_spec(plan.placeholder)
        except ElementTypeNeeded as need:
            owned = [i for i, v in enumerate(init)
                     if getattr(v, "key", None) is need.tensor_list.key]
            mark.rollback()
            if not owned:
                raise
            for i in owned:
                init[i] = TensorList.from_list(need.tensor_list.items or [], need.dtype,
                                               need.shape)
    set_state(state.rebuild(plans, outputs))


def _build_loop(test, body, get_state, set_state, names, init, loc):
    dfc = core.dfc()
    plans = state.plans_for(names, init)

    def enter(leaves):
        set_state(state.rebuild(plans, leaves))

    def cond_fn(*leaves):
        enter(leaves)
        go_on = test()
        if not core.is_tensor(go_on):
            go_on = dfc.constant(bool(go_on))
        return go_on

    def body_fn(*leaves):
        enter(leaves)
        body()
        values = list(get_state())
        after = state.plans_for(names, values)
        replan = False
        for i, (before, now) in enumerate(zip(plans, after)):
            merged = state.check_compatible(before, now, loc, "loop")
            if merged.placeholder is not None:
                plans[i] = merged
                replan = True
        if replan:
            raise state.Replan(plans)
        _check_dtypes(plans, after, loc)
        return tuple(state.dynamic_values(plans, values))

    leaves = tuple(state.dynamic_values(plans))
    outputs = dfc.while_loop(cond_fn, body_fn, leaves, names=state.dynamic_names(plans))
    if not isinstance(outputs, (tuple, list)):
        outputs = (outputs,)
    return plans, tuple(outputs)


def _check_dtypes(before, after, loc):
    for a, b in zip(before, after):
        if a.undefined or b.undefined:
            continue
        for x, y in zip(a.leaves, b.leaves):
            if core.is_tensor(x) and core.is_tensor(y) and x.dtype != y.dtype and not x.weak:
                # (a weakly typed variable, e.g. `s = 0`, takes the dtype the body gives it:
                # dfc.while_loop retraces the loop with that dtype)
                raise DfcLoopVariableError(
                    f"loop variable {describe(a.name)} is {x.dtype} when the loop starts and "
                    f"{y.dtype} after an iteration; cast it (dfc.cast) so its dtype stays the "
                    f"same", loc=loc)
