"""while_stmt and for_stmt: Python loops on Python values, dfc.while_loop on tensors."""
import warnings

import numpy as np

from dfc import nest
from dfc.compiler import control_flow, ops_api
from dfc.compiler.autograph import core, iterables, loop_scope, state, unset
from dfc.compiler.autograph.conditionals import tensor_if
from dfc.compiler.autograph.errors import DfcLoopVariableError, DfcUnrolledLoopWarning, describe
from dfc.compiler.autograph.origin import generated_caller_location, generated_caller_origin
from dfc.compiler.autograph.special_values import is_undefined
from dfc.compiler.autograph.state import VarPlan
from dfc.compiler.autograph.tensor_list import ListNeeds, TensorList
from dfc.errors import DfcError

UNROLL_WARNING = 10000


def while_stmt(test, body, get_state, set_state, names, opts=None):
    """Equivalent to `while test(): body()`.

    A tensor test (now or after some Python iterations, e.g. `while True:`
    with a break on a tensor condition) makes the rest of the loop a
    dfc.while_loop over the variables `names`.
    """
    loc = generated_caller_location()
    b = core.current_builder()
    count = 0
    while True:
        mark = b.mark() if b is not None else None
        cond = test()
        if core.is_tensor(cond):
            if mark is not None:    # the loop evaluates the test again in its cond: its effects run once
                b.rollback(mark)
            return tensor_while(test, body, get_state, set_state, names, opts, loc)
        if not cond:
            return
        body()
        count += 1
        _warn_unrolled(count, loc)


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
    count, warned = 0, False
    for item in iter_:
        if extra_test is not None:
            go_on = extra_test()
            if core.is_tensor(go_on):
                if not warned and isinstance(iter_, range):
                    _warn_unrolled_break(iter_, count)
                    warned = True
                tensor_if(go_on, lambda item=item: body(item), None, get_state, set_state,
                          names, loc)
                continue
            if not go_on:
                break
        body(item)
        count += 1
        _warn_unrolled(count, loc)


def _warn_unrolled_break(iter_, done):
    """A break/return on a tensor condition in a loop over a Python range: the loop is unrolled,
    and every iteration from here on is built under a dfc.cond."""
    where = generated_caller_origin(3) or ("<unknown>", 0)
    rest = len(iter_) - done
    warnings.warn_explicit(
        f"this `for` loop over a Python {_range_text(iter_)} was unrolled while tracing, and its `break` (or "
        f"`return`) depends on a tensor: the remaining {rest} iteration(s) are each built into the "
        f"graph under a dfc.cond: use dfc.range for a tensor loop (dfc.range(...), or range() of a "
        f"tensor), which stops in the graph when the condition says so",
        DfcUnrolledLoopWarning, where[0], where[1])


def _range_text(r):
    if r.step == 1:
        return f"range({r.stop})" if r.start == 0 else f"range({r.start}, {r.stop})"
    return f"range({r.start}, {r.stop}, {r.step})"


def _warn_unrolled(count, loc):
    if count == UNROLL_WARNING + 1:
        warnings.warn(f"{loc}: a Python loop has been unrolled more than {UNROLL_WARNING} times "
                      f"while tracing; loop over a tensor (dfc.range, or range() of a tensor) "
                      f"to build an in-graph loop instead", stacklevel=3)


def _tensor_for(iteration, extra_test, body, get_state, set_state, names, opts, loc):
    box = [ops_api.constant(0, dtype=iteration.counter_dtype)]

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
                go_on = ops_api.logical_and(go_on, more)
            elif not more:
                go_on = ops_api.logical_and(go_on, False)
        return go_on

    def loop_body():
        i = box[0]
        body(iteration.get(i))
        box[0] = i + 1

    return tensor_while(test, loop_body, get, set_, (COUNTER,) + tuple(names), opts, loc,
                        counted=True, user_fns=(body, extra_test))


COUNTER = "<iteration counter>"


def _with_counter(test, body, get_state, set_state, names):
    """The loop with an iteration counter as its first variable (starting at 0)."""
    box = [None]

    def get():
        return (box[0],) + tuple(get_state())

    def set_(values):
        box[0] = values[0]
        set_state(tuple(values[1:]))

    def loop_body():
        body()
        box[0] = box[0] + 1

    return test, loop_body, get, set_, (COUNTER,) + tuple(names)


class _Loop:
    """What tensor_while builds: the functions of a loop and the values it starts from."""

    def __init__(self, test, body, get_state, set_state, names, original, counted, user_fns):
        self.test, self.body, self.get_state, self.set_state = test, body, get_state, set_state
        self.names, self.counted, self.user_fns = tuple(names), counted, user_fns
        self.original = list(original)      # the values before the loop, as the program has them
        self.init = list(original)          # the values the graph loop starts from
        self.created = set()                # indices of variables first set inside the loop
        self.flags = {}     # index of a variable that may have no value -> its "is set" flag's
        self.entered = self.after = None    # the values an iteration starts from and ends with

    def add_counter(self):
        """An iteration counter as first variable: a loop needs at least one variable."""
        zero = ops_api.constant(0, dtype="int64")
        self.test, self.body, self.get_state, self.set_state, self.names = _with_counter(
            self.test, self.body, self.get_state, self.set_state, self.names)
        self.original.insert(0, zero)
        self.init.insert(0, zero)
        self.counted = True

    def add_flag(self, index, init):
        """Carry the "is set" flag of variable `index` (see unset.py), starting at `init`."""
        self.flags[index] = len(self.names)
        self.names += (f"<{self.names[index]} is set>",)
        self.original.append(init)
        self.init.append(init)
        self.get_state, self.set_state = unset.with_flag(self.get_state, self.set_state, index)


def tensor_while(test, body, get_state, set_state, names, opts, loc, counted=False,
                 user_fns=None):
    """A dfc.while_loop over `names`. `counted`: names[0] is an iteration counter from 0."""
    loop = _Loop(test, body, get_state, set_state, names, get_state(), counted,
                 user_fns or (test, body))
    lists = set((opts or {}).get("lists", ()))
    for i, name in enumerate(loop.names):
        if name in lists and isinstance(loop.init[i], list):
            loop.init[i] = TensorList.from_list(loop.init[i])
    for i, value in enumerate(list(loop.init)):
        flag = unset.registered_flag(value)       # set in an enclosing loop that may not have run
        if flag is not None:
            loop.add_flag(i, flag)
    if not loop.counted and not state.dynamic_values(state.plans_for(loop.names, loop.init)):
        loop.add_counter()    # a loop of side effects only: `while v.read_value() < n: ...`
    b = core.current_builder()
    attempts = 0
    while True:
        # Each replan gives a variable a placeholder or a list its element type or dense form,
        # so a loop is built at most about twice per variable.
        attempts += 1
        if attempts > 2 * len(loop.names) + 2:
            raise DfcError(f"internal: the plan of this tensor loop did not settle after "
                           f"{attempts - 1} traces", loc=loc)
        mark, effects = b.mark(), b.effect_count
        try:
            keys = [v.key for v in loop.init if isinstance(v, TensorList)]
            with loop_scope.LoopScope(loop.user_fns, keys, loc):
                plans, outputs = _build_loop(loop, loc)
            break
        except state.Replan as replan:
            b.rollback(mark)
            for i, plan in enumerate(replan.plans):
                if plan.placeholder is not None:
                    loop.init[i] = state.placeholder_from_spec(plan.placeholder)
            for i in sorted(loop.created - set(loop.flags)):
                loop.add_flag(i, ops_api.constant(False))
        except ListNeeds as need:
            b.rollback(mark)
            _rebuild_list(loop, need)
    values = list(state.rebuild(plans, outputs))
    if b.effect_count == effects and b.ctx is None:
        _check_ends(loop, values, loc)
    for i, k in loop.flags.items():
        values[i] = unset.guarded(values[i], values[k], describe(loop.names[i]), loc)
    loop.set_state(tuple(values))


def _rebuild_list(loop, need):
    """Start the list the loop carries again, with the element type / form the body needs."""
    owned = [i for i, v in enumerate(loop.init)
             if isinstance(v, TensorList) and v.key is need.tensor_list.key]
    if not owned or any(isinstance(loop.original[i], TensorList)
                        and loop_scope.carries(loop.original[i]) for i in owned):
        raise need       # carried by an enclosing loop: that one starts it again
    for i in owned:
        old, original = loop.init[i], loop.original[i]
        dtype = need.dtype if need.dtype is not None else (
            old.dtype if old.items is None else None)
        shape = need.shape if need.dtype is not None else old.element_shape
        dense = need.dense or old.dense
        if isinstance(original, TensorList) and original.typed:   # made by an earlier loop
            loop.init[i] = original.densified(dtype)
        else:
            items = (original.items or []) if isinstance(original, TensorList) else original
            loop.init[i] = TensorList.from_list(items, dtype, shape, dense=dense)


def _build_loop(loop, loc):
    names, set_state = loop.names, loop.set_state
    plans = state.plans_for(names, loop.init)

    def enter(leaves):
        set_state(state.rebuild(plans, leaves))

    def cond_fn(*leaves):
        enter(leaves)
        go_on = loop.test()
        if not core.is_tensor(go_on):
            go_on = ops_api.constant(bool(go_on))
        return go_on

    def body_fn(*leaves):
        enter(leaves)
        loop.entered = list(loop.get_state())
        loop.body()
        values = list(loop.get_state())
        loop.after = values
        after = state.plans_for(names, values)
        # (`plans` and `loop` change only when the loop is replanned: dfc.while_loop may trace
        # this body again with other dtypes)
        replanned, created = list(plans), set()
        for i, (before, now) in enumerate(zip(plans, after)):
            if _first_set_in_loop(before, now):
                merged = VarPlan(now.name, now.value)
                merged.placeholder = state.placeholder_spec(now.value)
                created.add(i)
            else:
                merged = state.check_compatible(before, now, loc, "loop")
            if merged.placeholder is not None:
                replanned[i] = merged
        if any(p is not q for p, q in zip(replanned, plans)):
            loop.created |= created
            raise state.Replan(replanned)
        _check_dtypes(plans, after, loc)
        return tuple(state.dynamic_values(plans, values))

    leaves = tuple(state.dynamic_values(plans))
    outputs = control_flow.while_loop(cond_fn, body_fn, leaves, names=state.dynamic_names(plans))
    if not isinstance(outputs, (tuple, list)):
        outputs = (outputs,)
    return plans, tuple(outputs)


def _check_ends(loop, exits, loc):
    """Raise if the loop can never end: its condition is a constant True once every variable
    that keeps one constant value (the same before the loop and after an iteration) has it, and
    the loop has no side effects (a dequeue may end it with an error). Such a graph would hang
    whenever it runs (a Python loop would too): say so while tracing. Only for a loop outside
    any cond or loop (which every run reaches): inside one, Python would hang only when it is
    reached, and inputs may never reach it."""
    if loop.after is None:
        return
    fixed = [_same_constant(init, entered, after)
             for init, entered, after in zip(loop.init, loop.entered, loop.after)]
    b = core.current_builder()
    mark = b.mark()
    try:
        loop.set_state(tuple(init if keep else out for init, out, keep in zip(loop.init, exits, fixed)))
        go_on = loop.test()
    except Exception:   # noqa: BLE001 — only a test that evaluates to a constant is reported
        return
    finally:
        b.rollback(mark)
    if _constant(go_on) is None or not _constant(go_on).all():
        return
    kept = [describe(n) for n, keep in zip(loop.names, fixed) if keep and n != COUNTER]
    why = (f" ({', '.join(kept)} {'is' if len(kept) == 1 else 'are'} the same constant in every "
           f"iteration)" if kept else "")
    raise DfcLoopVariableError(
        f"this loop never ends: its condition is always True{why} and nothing in the loop can stop "
        f"it (no `break` or `return` on a tensor condition, no side effect): the graph would run "
        f"forever. Make the condition depend on something the loop changes", loc=loc)


def _constant(x):
    """x's value when it is known while tracing (a number or a constant tensor), else None."""
    if core.is_tensor(x):
        value = x.ttype.value
        return None if value is None else np.asarray(value)
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)):
        return np.asarray(x)
    return None


def _same_constant(init, entered, after):
    """Whether a loop variable has the value `init` in every iteration: it is a known constant
    that an iteration leaves as it is or sets to that same constant."""
    leaves = nest.flatten(init) if not is_undefined(init) else None
    if not leaves:
        return False
    for a, e, z in zip(leaves, nest.flatten(entered), nest.flatten(after)):
        va = _constant(a)
        if va is None:
            return False
        if z is e:
            continue
        vz = _constant(z)
        if vz is None or vz.shape != va.shape or not np.array_equal(vz, va):
            return False
    return len(nest.flatten(after)) == len(leaves)


def _first_set_in_loop(before, now):
    """A variable with no value before the loop that the body sets to tensors or numbers
    (valid in Python when the loop runs at least once; checked at run time, see unset.py)."""
    return (before.undefined and not before.is_return_value and not now.undefined
            and now.kinds and all(k == state.DYN for k in now.kinds))


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
