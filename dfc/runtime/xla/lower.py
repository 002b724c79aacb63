"""A whole run of a Plan as one function traced by jax.jit.

The frames, their loop variables, predicate and body come from fused.py's analysis (FrameAnalysis, run by
`Analysis` without generating code). Each loop frame becomes a lax.while_loop whose carry is the frame's
loop Merges plus the run's state: every gradient stack as (buffer, count, high-water mark), every
TensorArray, every Variable's value, and the error flags. Conds inside frames are predicated, as JAX
programs write them with jnp.where: a Switch gives its two outputs the liveness `live & p` and
`live & ~p` (a conjunction of predicate literals, kept symbolically, so the Merge of a cond's two
branches is live exactly where the cond was), both branches compute, the Merge selects, and side effects
(stack pushes and pops, TensorArray writes, Variable assigns) take effect only where their node is live.
A loop frame that may be dead (inside an untaken branch) runs under lax.cond.

Stacks (state.py, with TensorArrays and Variables) are preallocated buffers: a push writes at `count` (past
the capacity, or when the push is dead, into one spare row), a pop reads at `count - 1`. TensorArrays are
buffers with a mask of written rows and a length. The capacities, and the length each TensorArrayStack gives,
are static (part of what is compiled); the run reports the high-water marks and lengths, and program.py runs
again with larger buffers when a loop outran one. Once a pop reads past a capacity its value is garbage, so
every loop stops (the flag `poison` joins each loop predicate): a gradient loop driven by popped counts cannot
run away before the re-run. Errors dfc raises at run time (pop from an empty stack, a TensorArray index out of
range, written twice or read unwritten) are flags the run returns.

Every op whose inputs are all concrete numpy values (constants, shapes: XLA shapes are static) is folded
with dfc's own numpy kernel, so shape arithmetic has dfc's exact semantics and gives XLA static shapes.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from dfc.ir import ops as opreg
from dfc.runtime import emit as E
from dfc.runtime.kernel_context import KernelContext
from dfc.ir.kinds import MERGE, NEXT, SWITCH
from dfc.runtime.fused import _TAGGED_OPS, FrameProgram, NotFusable, _toposort
from dfc.runtime.xla.random import OPS as RANDOM_OPS, lower as lower_random
from dfc.runtime.kernels.registry import host
from dfc.runtime.xla import checks, jops
from dfc.runtime.xla.jops import NotLowerable
from dfc.runtime.xla.state import STATE_OPS, StackRef, StateOps, TARef, _concrete

TRUE = frozenset()          # liveness: live (a conjunction of no literals)
DEAD = None                 # liveness: dead whatever the inputs


class Analysis(FrameProgram):
    """fused.py's analysis of every loop frame (fid -> FrameAnalysis in `frames`) and the root's order."""

    def __init__(self, plan, index):     # noqa: D107 — deliberately not FrameProgram.__init__: no code
        self.plan, self.fid, self.traced, self.index = plan, 0, True, index
        self.lines, self.helpers, self._counter = E.Lines(), {}, 0
        self.frames = {}
        for c in sorted(index.children[0]):
            try:
                self._emit_frame(c, E.ident("frame", c), 0)
            except NotFusable as e:
                raise NotLowerable(f"loop frame {plan.frame_names[c]!r}: {e}") from None
        items, producer = self._items(index.members[0], sorted(index.children[0]))
        deps = {it: {producer[s] if s in producer else ("node", s) for s in self._item_inputs(it)
                     if s in producer or plan.fid[s] == 0} for it in items}
        self.root = _toposort(items, deps)

    def _gen(self, a):
        self.frames[a.fid] = a


class Literals:
    """The predicate values of one scope (a loop body, the root): literal k -> a traced bool."""

    def __init__(self):
        self.values, self.by_id = [], {}

    def of(self, pred):
        k = self.by_id.get(id(pred))
        if k is None:
            k = self.by_id[id(pred)] = len(self.values)
            self.values.append((pred, jnp.reshape(jnp.asarray(pred), ())))
        return k

    def value(self, live):
        """The traced bool of a liveness (True for TRUE)."""
        out = True
        for k, pol in sorted(live):
            b = self.values[k][1]
            b = b if pol else jnp.logical_not(b)
            out = b if out is True else jnp.logical_and(out, b)
        return out


# Elements (a node's inputs and outputs) from which a node in a cond's branch runs under a lax.cond of its
# own rather than being computed every time and selected: a lax.cond costs about a microsecond, and it
# keeps XLA from fusing an elementwise op with its neighbours.
_HEAVY, _HEAVY_ELEMENTWISE = 512, 16384
_ELEMENTWISE = frozenset(jops._BINARY) | frozenset(jops._UNARY) | {"Cast", "Where", "Select"}


def conj(lives):
    out = TRUE
    for lv in lives:
        if lv is DEAD:
            return DEAD
        out = out | lv
    return out


class Lowerer(StateOps):
    """One trace of the run. discover=True: the abstract pass (under jax.eval_shape) that runs each loop
    body once to learn what each stack holds (`stack_avals`), before the real trace allocates buffers."""

    def __init__(self, plan, analysis, types, caps, stack_avals, discover, ta_lengths=None):
        """caps: stack or TensorArray node -> entries its buffer holds; stack_avals: node -> (shape, dtype)
        of an entry (found by the discover pass); ta_lengths: TensorArrayStack node -> the length it
        stacks (static for XLA; program.py re-runs when the array's length differs)."""
        self.p, self.an, self.types, self.caps = plan, analysis, types, caps
        self.stack_avals, self.discover = stack_avals, discover
        self.ta_lengths = ta_lengths if ta_lengths is not None else {}
        self.ta_sizes, self.depth = {}, 0
        self.made = {}        # loop frame -> the state entries its body makes (_body_state)
        self.ctx = KernelContext()
        self.run_count, self.tag = 0, []      # random draws' counter: [(frame id, traced iteration), ...]

    # ------------------------------------------------------------------ the run
    def run(self, feeds, variables, run_count=0):
        """(fetched values, their liveness as bools, the final state) of the run (the Session's run_count-th)."""
        p = self.p
        self.run_count = run_count
        env, live = {}, {}
        for i, v in zip(self.feed_nodes(), feeds):
            if i is not None:           # (an input the outputs do not use is not in the plan)
                env[(i, 0)], live[(i, 0)] = v, TRUE
        state = {"poison": jnp.bool_(False)}
        self.stacked = {}
        state.update(variables)
        checks.init(self, state)
        lits = Literals()
        self.eval_items(self.an.root, None, env, live, state, lits)
        state["stacked"] = dict(self.stacked)       # (not state: the lengths each TensorArrayStack saw)
        outs, lives = [], []
        for ref in p.fetches:
            lv = live.get(ref, DEAD)
            outs.append(jnp.zeros(()) if lv is DEAD else jnp.asarray(env[ref]))
            lives.append(jnp.bool_(False) if lv is DEAD else jnp.asarray(lits.value(lv)))
        return outs, lives, state

    def feed_nodes(self):
        return [self.p.feed_index.get(name) for name in self.feed_names]

    # ------------------------------------------------------------------ items
    def eval_items(self, items, a, env, live, state, lits, pure=False):
        for it in items:
            if it[0] == "frame":
                if pure:
                    raise NotLowerable("a loop frame computes part of another loop's predicate",
                                       node=self.p.nodes[self.an.index.enters[it[1]][0]].name)
                self.eval_frame_item(it[1], env, live, state, lits)
            else:
                self.eval_node(it[1], env, live, state, lits, pure)

    def eval_node(self, i, env, live, state, lits, pure):
        p = self.p
        node, kind = p.nodes[i], p.kind[i]
        if (i, 0) in env and node.name in p.feed_index:
            return
        vals = [env.get(s) for s in p.ins[i]]
        lv = [live.get(s, DEAD) for s in p.ins[i]]
        ctrl = [live.get((c, 0), DEAD) for c in p.ctrl_ins[i]]
        nout = max(len(p.out_edges[i]), 1)
        if kind == SWITCH:
            return self._switch(i, vals, conj(lv + ctrl), env, live, lits)
        if kind == MERGE:
            return self._merge(i, vals, lv, env, live, lits)
        L = conj(lv + ctrl)
        if L is DEAD:
            for k in range(nout):
                live[(i, k)] = DEAD
            return
        op = node.op
        if pure and op in STATE_OPS:
            raise NotLowerable("a stateful op computes part of a loop's predicate", node=node.name)
        if op in RANDOM_OPS:
            outs = lower_random(node, vals, self.run_count, self.tag)
        elif op in STATE_OPS:
            outs = self.state_op(node, i, vals, L, state, lits)
        elif op == "Const":
            outs = list(p.kern[i](None, ()))
        elif op in checks.EFFECTS:
            outs = checks.effect(self, node, i, vals, L, state, lits)
        elif opreg.get(op).stateful or op in _TAGGED_OPS:
            raise NotLowerable(f"no XLA lowering for the stateful op {op}", node=node.name)
        else:
            outs = None
            if all(_concrete(v) for v in vals):     # fold with dfc's own kernel: exact, and static for XLA
                try:
                    with np.errstate(all="ignore"):
                        outs = list(p.kern[i](self.ctx, vals))
                except Exception as e:      # noqa: BLE001 — a live node's error is the run's error
                    if L == TRUE and not self.depth:     # (in a loop: only if an iteration runs)
                        from dfc.runtime.limits import kernel_error
                        raise kernel_error(node, e) from None
            if outs is None:
                checks.check(self, node, i, vals, L, state, lits)
                outs = self._guarded(node, vals, L, lits)
                checks.after(self, node, i, vals, outs, L, state, lits)
                outs = [self._typed(node, k, o) for k, o in enumerate(outs)]
        for k in range(nout):
            env[(i, k)] = outs[k] if k < len(outs) else True
            live[(i, k)] = L

    def _guarded(self, node, vals, L, lits):
        """checks.lower(node, vals); a large node live only under a predicate (in a cond's branch) runs inside
        a lax.cond on it, so a branch not taken costs nothing: XLA computes both sides of a select, and the
        rest of a cond lowers to selects (a rare, heavy branch, such as a particle filter's resampling, would
        otherwise run every iteration)."""
        if L == TRUE or self.discover:
            return checks.lower(node, vals)
        traced = [k for k, v in enumerate(vals) if isinstance(v, jax.core.Tracer)]

        def run(*args):
            a = list(vals)
            for k, v in zip(traced, args):
                a[k] = v
            return list(checks.lower(node, a))

        args = [vals[k] for k in traced]
        shapes = jax.eval_shape(run, *args)
        size = sum(int(np.prod(s.shape)) for s in shapes) + sum(int(np.prod(jnp.shape(v))) for v in args)
        if not args or size < (_HEAVY_ELEMENTWISE if node.op in _ELEMENTWISE else _HEAVY):
            return run(*args)
        return lax.cond(lits.value(L), run, lambda *a: [jnp.zeros(s.shape, s.dtype) for s in shapes], *args)

    def _typed(self, node, k, v):
        """v in the dtype dfc's type inference gives the output (jnp's promotion differs from numpy's)."""
        t = self.types.get(node.name)
        want = t[k].dtype if t is not None and k < len(t) else None
        if want is None or want in ("resource", "handle") or _concrete(v):
            return v
        v = jnp.asarray(v)
        return v if v.dtype == np.dtype(want) else v.astype(want)

    def _switch(self, i, vals, L, env, live, lits):
        d, pr = vals
        env[(i, 0)] = env[(i, 1)] = d
        if L is DEAD:
            live[(i, 0)] = live[(i, 1)] = DEAD
        elif _concrete(pr):
            taken = bool(host(pr))
            live[(i, 1)], live[(i, 0)] = (L, DEAD) if taken else (DEAD, L)
        else:
            k = lits.of(pr)
            live[(i, 0)], live[(i, 1)] = L | {(k, False)}, L | {(k, True)}

    def _merge(self, i, vals, lv, env, live, lits):
        cands = [(v, L, k) for k, (v, L) in enumerate(zip(vals, lv)) if L is not DEAD]
        if not cands:
            live[(i, 0)] = live[(i, 1)] = DEAD
            return
        v, L, idx = cands[0]
        idx = np.int32(idx)
        for v1, L1, k1 in cands[1:]:
            if v1 is not v:
                if not (_array(v) and _array(v1)):
                    raise NotLowerable("a cond whose branch gives something other than a tensor",
                                       node=self.p.nodes[i].name)
                v, v1 = _same_shape(v, v1, self.p.nodes[i])
            d0, d1 = L - L1, L1 - L
            if len(d0) == 1 and len(d1) == 1 and next(iter(d0))[0] == next(iter(d1))[0]:
                (kk, pol), = d0           # a cond's two branches: live where the cond was
                c = lits.values[kk][1]
                c = c if pol else jnp.logical_not(c)
                newL = L & L1
            else:
                c = lits.value(L)
                newL = frozenset({(lits.of(jnp.logical_or(c, lits.value(L1))), True)})
            # equal constants (a shape that both branches compute) stay constants: XLA needs shapes static
            same = v1 is v or (_concrete(v) and _concrete(v1) and np.shape(v) == np.shape(v1)
                               and np.asarray(v).dtype == np.asarray(v1).dtype and np.array_equal(v, v1))
            v = v if same else jnp.where(c, v, v1)
            idx = jnp.where(c, idx, np.int32(k1))
            L = newL
        env[(i, 0)], env[(i, 1)] = v, idx
        live[(i, 0)] = live[(i, 1)] = L

    # ------------------------------------------------------------------ state
    def _ta(self, node, i, vals, L, state, lits):
        """state.py's TensorArrays, with better first guesses of the length a TensorArrayStack stacks than
        the array's size alone: a gradient array holds as many elements as its forward array, and an array
        unstacked from a value holds at least that value's rows. A wrong guess costs a re-run, but one that
        makes shapes disagree while tracing (the stacked gradient added to another gradient of the input)
        fails before the re-run could learn the length."""
        out = super()._ta(node, i, vals, L, state, lits)
        ref = vals[0] if vals else None
        if node.op == "TensorArrayGrad" and isinstance(ref, TARef) and ref.node in self.ta_sizes:
            self.ta_sizes.setdefault(i, self.ta_sizes[ref.node])
        elif node.op == "TensorArrayUnstack" and isinstance(ref, TARef) and jnp.ndim(vals[1]):
            self.ta_sizes[ref.node] = max(self.ta_sizes.get(ref.node, 0), int(jnp.shape(vals[1])[0]))
        return out

    def _stack(self, node, i, vals, L, state, lits):
        """A stack whose every push is one numpy constant pops that constant. Reverse mode saves each
        iteration's shapes on stacks; XLA shapes are static, so they are constants of the trace (the same
        in every iteration), and popping them as constants keeps the gradient's shapes static. The discover
        pass (which runs every push before the pops) records them in stack_avals under ("const", stack)."""
        out = super()._stack(node, i, vals, L, state, lits)
        if node.op not in ("StackPush", "StackPop") or not isinstance(vals[0], StackRef):
            return out
        key = ("const", vals[0].node)
        if node.op == "StackPush":
            v, known = vals[1], self.stack_avals.get(key, _UNSEEN)
            same = _concrete(v) and (known is _UNSEEN or (known is not None and _equal(known, v)))
            if self.discover:
                self.stack_avals[key] = np.asarray(v) if same else None
            elif known is not None and not same:
                raise NotLowerable("a push that differs from what the abstract pass saw", node=node.name)
            return out
        known = self.stack_avals.get(key)
        return out if known is None else known

    def eval_frame_item(self, c, env, live, state, lits):
        p = self.p
        a = self.an.frames[c]
        enters = self.an.index.enters[c]
        vals = [env.get(p.ins[e][0]) for e in enters]
        L = conj([live.get(p.ins[e][0], DEAD) for e in enters] +
                 [live.get((s, 0), DEAD) for e in enters for s in p.ctrl_ins[e]])
        if L is DEAD:
            for e in a.exits:
                live[(e, 0)] = DEAD
            return
        if L == TRUE or self.discover:
            outs, new = self.run_frame(a, enters, vals, state)
        else:       # the loop sits in a branch that may not be taken: run it only where it is
            def taken(st):
                return self.run_frame(a, enters, vals, st)

            shapes = jax.eval_shape(taken, state)

            def skipped(st):        # (with the entries the loop would make, as both branches give one structure)
                return [jnp.zeros(s.shape, s.dtype) for s in shapes[0]], {**_zeros(shapes[1]), **st}
            outs, new = lax.cond(lits.value(L), taken, skipped, state)
        state.clear()
        state.update(new)
        for e, v in zip(a.exits, outs):
            env[(e, 0)], live[(e, 0)] = v, L

    def run_frame(self, a, enters, vals, state):
        """(exit values in a.exits order, the state after) of loop frame `a` entered with `vals`."""
        p = self.p
        base = {(e, 0): v for e, v in zip(enters, vals)}
        pre = [it for it in a.order if it not in a.body]
        body = [it for it in a.order if it in a.body]
        init = []
        for m in a.merges:
            v = base[(p.ins[m][0][0], 0)]
            if not _array(v):
                raise NotLowerable("a loop variable that is not a tensor", node=p.nodes[m].name)
            init.append(jnp.asarray(v))
        init.append(np.int64(0))        # the iteration count, after the loop variables: the draws' tag
        outer = self.tag
        nexts = [p.ins[[s for s, _ in p.ins[m] if p.kind[s] == NEXT][0]][0] for m in a.merges]
        pred_ref = p.ins[a.loop_cond][0]

        def setup(mv):
            env = dict(base)
            for m, v in zip(a.merges, mv):
                env[(m, 0)] = v
            self.tag = outer + [(a.fid, mv[-1])]
            live = {k: TRUE for k in env}
            return env, live, Literals()

        def predicate(env, live, st):
            if live.get(pred_ref, DEAD) != TRUE:
                raise NotLowerable("a loop predicate that a cond may make dead", node=p.nodes[a.loop_cond].name)
            return jnp.reshape(jnp.asarray(env[pred_ref]), ()).astype(bool)

        def cond_fun(carry):
            mv, st = carry
            env, live, lits = setup(mv)
            st = dict(st)
            self.eval_items(pre, a, env, live, st, lits, pure=True)
            return predicate(env, live, st) & jnp.logical_not(st["poison"]) & checks.ok(st)

        def body_fun(carry):
            mv, st = carry
            st = dict(st)
            env, live, lits = setup(mv)
            self.eval_items(pre, a, env, live, st, lits, pure=True)
            for sw, m in a.switches.items():
                env[(sw, 0)] = env[(sw, 1)] = env[(m, 0)]
                live[(sw, 0)] = live[(sw, 1)] = TRUE
            self.eval_items(body, a, env, live, st, lits)
            out = []
            for m, ref, v0 in zip(a.merges, nexts, init):
                if live.get(ref, DEAD) != TRUE:
                    raise NotLowerable("a loop variable that a cond may make dead", node=p.nodes[m].name)
                v = jnp.asarray(env[ref])
                if v.shape != v0.shape or v.dtype != v0.dtype:
                    raise NotLowerable(f"a loop variable that changes from {v0.dtype}{list(v0.shape)} to "
                                       f"{v.dtype}{list(v.shape)} (XLA loops keep shapes)", node=p.nodes[m].name)
                out.append(v)
            out.append(mv[-1] + 1)
            return tuple(out), st

        if not self.discover:       # the stacks and TensorArrays the body makes
            body_fun, state = self._body_state(a, body_fun, tuple(init), state)
        self.depth += 1
        try:
            if self.discover:           # one iteration, abstractly: what the body pushes, and that shapes hold
                body_fun((tuple(init), dict(state)))
                final, st = tuple(init), dict(state)
            else:
                final, st = lax.while_loop(cond_fun, body_fun, (tuple(init), dict(state)))
                if checks.rechecks(p, pre):     # the failures of the predicate's last evaluation
                    st = dict(st)
                    env, live, lits = setup(final)
                    self.eval_items(pre, a, env, live, st, lits, pure=True)
        finally:
            self.depth -= 1
            self.tag = outer
        outs = []
        for e in a.exits:
            outs.append(final[a.merges.index(a.switches[p.ins[e][0][0]])])
        return outs, st

    def _body_state(self, a, body_fun, init, state):
        """(the body to loop, the state to enter the loop with) of loop frame `a`. A stack or TensorArray
        made inside a loop body (a training loop's gradient stacks) is made afresh in every iteration, but
        lax.while_loop's carry keeps one structure: the loop enters with zeros for them, and each iteration
        keeps their high-water marks. The body's entries are found once per trace, abstractly."""
        made = self.made.get(a.fid)
        if made is None and not self._makes_state(a.fid):
            made = self.made[a.fid] = {}
        if made is None:
            self.depth += 1
            try:
                _, out = jax.eval_shape(body_fun, (init, dict(state)))
            finally:
                self.depth -= 1
            made = self.made[a.fid] = {k: v for k, v in out.items() if k not in state}
        if not made:
            return body_fun, state
        if any(k[0] not in "st" or not k[1:].isdigit() for k in made):
            raise NotLowerable("a Variable made inside a loop (make it outside: its value is carried)",
                               node=self.p.nodes[a.loop_cond].name)

        def body_keep(carry):
            mv, st = body_fun(carry)
            return mv, _keep_highs(carry[1], st, made)
        return body_keep, {**_zeros(made), **state}

    def _makes_state(self, fid):
        """Whether loop frame fid, or a frame inside it, holds a node that makes a stack, TensorArray or
        Variable (most loops do not: they skip the abstract pass of _body_state)."""
        index, nodes = self.an.index, self.p.nodes
        todo = [fid]
        while todo:
            f = todo.pop()
            if any(nodes[i].op in _MAKERS for i in index.members[f]):
                return True
            todo += index.children.get(f, ())
        return False


_MAKERS = ("StackV2", "TensorArray", "TensorArrayGrad", "VarHandle")


def _zeros(avals):
    return {k: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), v) for k, v in avals.items()}


def _keep_highs(before, after, made):
    """The state after an iteration, where each stack or TensorArray the body made afresh keeps the
    high-water mark of every iteration so far (program.py sizes the buffers from it)."""
    out = dict(after)
    for k in made:
        at = 2 if k[0] == "s" else 3
        v = list(after[k])
        v[at] = jnp.maximum(v[at], before[k][at])
        out[k] = tuple(v)
    return out


def _same_shape(v, v1, node):
    """A Merge's inputs in one shape. The gradient's lifted values (dfc/compiler/autodiff) merge a value
    from the taken branch with a 0-d zero constant from the other, which only that other branch's
    gradient reads (and ignores): the constant is broadcast, as XLA needs one shape."""
    s, s1 = jnp.shape(v), jnp.shape(v1)
    if s == s1:
        return v, v1
    if _concrete(v1) and np.size(v1) == 1:
        return v, jnp.broadcast_to(jnp.asarray(v1).reshape(()), s)
    if _concrete(v) and np.size(v) == 1:
        return jnp.broadcast_to(jnp.asarray(v).reshape(()), s1), v1
    raise NotLowerable(f"a cond whose branches give tensors of shapes {list(s)} and {list(s1)}", node=node.name)


_UNSEEN = object()


def _equal(a, b):
    b = np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _array(v):
    return _concrete(v) or isinstance(v, jax.Array) or hasattr(v, "aval")
