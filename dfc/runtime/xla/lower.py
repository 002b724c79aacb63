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

Stacks are preallocated buffers: a push writes at `count` (past the capacity, or when the push is dead,
into one spare row), a pop reads at `count - 1`. TensorArrays are buffers with a mask of written rows and
a length. The capacities, and the length each TensorArrayStack gives, are static (part of what is
compiled); the run reports the high-water marks and lengths, and program.py runs again with larger
buffers when a loop outran one. Once a pop reads past a capacity its value is garbage, so every loop
stops (the flag `poison` joins each loop predicate): a gradient loop driven by popped counts cannot run
away before the re-run. Errors dfc raises at run time (pop from an empty stack, a TensorArray index out
of range, written twice or read unwritten) are flags the run returns.

Every op whose inputs are all concrete numpy values (constants, shapes: XLA shapes are static) is folded
with dfc's own numpy kernel, so shape arithmetic has dfc's exact semantics and gives XLA static shapes.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from dfc.errors import DfcRuntimeError
from dfc.ir import ops as opreg
from dfc.runtime import emit as E
from dfc.runtime.executor import KernelContext
from dfc.runtime.fused import (_TAGGED_OPS, MERGE, NEXT, SWITCH, FrameProgram, NotFusable,
                               _toposort)
from dfc.runtime.kernels.registry import host
from dfc.runtime.xla import jops
from dfc.runtime.xla.jops import NotLowerable

TRUE = frozenset()          # liveness: live (a conjunction of no literals)
DEAD = None                 # liveness: dead whatever the inputs
_STACK_OPS = ("StackV2", "StackPush", "StackPop")
_VAR_OPS = ("VarHandle", "ReadVariable", "Assign", "AssignAdd", "AssignSub")
_TA_OPS = ("TensorArray", "TensorArrayGrad", "TensorArrayWrite", "TensorArrayRead", "TensorArraySize",
           "TensorArrayStack", "TensorArrayUnstack")


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


class StackRef:
    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


class TARef:
    """A TensorArray: its node (the state key), whether writes add up (gradient arrays), whether it grows."""
    __slots__ = ("node", "accumulate", "dynamic", "grad")

    def __init__(self, node, accumulate, dynamic, grad=False):
        self.node, self.accumulate, self.dynamic, self.grad = node, accumulate, dynamic, grad


class VarRef:
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key


def var_key(node):
    return "v:" + node.attrs.get("container", "") + ":" + node.attrs["shared_name"]


def _concrete(v):
    return isinstance(v, (np.ndarray, np.generic))


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


def conj(lives):
    out = TRUE
    for lv in lives:
        if lv is DEAD:
            return DEAD
        out = out | lv
    return out


class Lowerer:
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
        self.ctx = KernelContext()

    # ------------------------------------------------------------------ the run
    def run(self, feeds, variables):
        """(fetched values, their liveness as bools, the final state) of the run."""
        p = self.p
        env, live = {}, {}
        for i, v in zip(self.feed_nodes(), feeds):
            env[(i, 0)], live[(i, 0)] = v, TRUE
        state = {"poison": jnp.bool_(False), "under": jnp.bool_(False), "ta_error": jnp.bool_(False)}
        self.stacked = {}
        state.update(variables)
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
        return [self.p.feed_index[name] for name in self.feed_names]

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
        if pure and (op in _STACK_OPS or op in _VAR_OPS or op in _TA_OPS):
            raise NotLowerable("a stateful op computes part of a loop's predicate", node=node.name)
        if op in _TA_OPS:
            outs = self._ta(node, i, vals, L, state, lits)
        elif op in _STACK_OPS:
            outs = [self._stack(node, i, vals, L, state, lits)]
        elif op in _VAR_OPS:
            outs = [self._var(node, vals, L, state, lits)]
        elif op == "Const":
            outs = list(p.kern[i](None, ()))
        elif opreg.get(op).stateful or op in _TAGGED_OPS:
            raise NotLowerable(f"no XLA lowering for the stateful op {op}", node=node.name)
        else:
            outs = None
            if all(_concrete(v) for v in vals):     # fold with dfc's own kernel: exact, and static for XLA
                try:
                    with np.errstate(all="ignore"):
                        outs = list(p.kern[i](self.ctx, vals))
                except Exception as e:      # noqa: BLE001 — a live node's error is the run's error
                    if L == TRUE:
                        from dfc.runtime.limits import kernel_error
                        raise kernel_error(node, e) from None
            if outs is None:
                outs = jops.lower(node, vals)
                outs = [self._typed(node, k, o) for k, o in enumerate(outs)]
        for k in range(nout):
            env[(i, k)] = outs[k] if k < len(outs) else True
            live[(i, k)] = L

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
            v = v if v1 is v else jnp.where(c, v, v1)
            idx = jnp.where(c, idx, np.int32(k1))
            L = newL
        env[(i, 0)], env[(i, 1)] = v, idx
        live[(i, 0)] = live[(i, 1)] = L

    # ------------------------------------------------------------------ state
    def _stack(self, node, i, vals, L, state, lits):
        op = node.op
        if op == "StackV2":
            if not self.discover and i in self.stack_avals:
                shape, dtype = self.stack_avals[i]
                # one row more than the capacity: the row that dead and overflowing pushes write
                state[f"s{i}"] = (jnp.zeros((self.caps[i] + 1,) + shape, dtype), jnp.int32(0), jnp.int32(0))
            return StackRef(i)
        ref = vals[0]
        if not isinstance(ref, StackRef):
            raise NotLowerable(f"{op} on a stack the prototype cannot follow", node=node.name)
        s = ref.node
        if op == "StackPush":
            x = jnp.asarray(vals[1])
            if self.discover:
                known = self.stack_avals.setdefault(s, (x.shape, x.dtype))
                if known != (x.shape, x.dtype):
                    raise NotLowerable("pushes of different shapes onto one stack", node=node.name)
                return vals[1]
            buf, cnt, high = state[f"s{s}"]
            lv = lits.value(L)
            cap = self.caps[s]
            at = jnp.minimum(cnt, cap) if lv is True else jnp.where(lv, jnp.minimum(cnt, cap), cap)
            # an in-place row update (a scatter costs more per iteration); past the capacity it writes the
            # spare row, and the run is repeated with more rows
            buf = lax.dynamic_update_index_in_dim(buf, x.astype(buf.dtype), at, 0)
            cnt = cnt + 1 if lv is True else cnt + lv.astype(jnp.int32)
            state[f"s{s}"] = (buf, cnt, jnp.maximum(high, cnt))
            return vals[1]
        # StackPop
        if s not in self.stack_avals:
            raise NotLowerable("pop from a stack nothing pushes to", node=node.name)
        shape, dtype = self.stack_avals[s]
        if self.discover:
            return jnp.zeros(shape, dtype)
        buf, cnt, high = state[f"s{s}"]
        lv = lits.value(L)
        cnt = cnt - 1 if lv is True else cnt - lv.astype(jnp.int32)
        on = True if lv is True else lv
        state["under"] = state["under"] | (on & (cnt < 0))
        state["poison"] = state["poison"] | (on & (high > self.caps[s]))
        state[f"s{s}"] = (buf, cnt, high)
        return lax.dynamic_index_in_dim(buf, jnp.clip(cnt, 0, self.caps[s]), 0, keepdims=False)

    def _ta(self, node, i, vals, L, state, lits):
        """TensorArrays as (buffer, written mask, length, high-water mark) in the state."""
        op, at = node.op, node.attrs
        flow = jnp.float32(0.0)
        if op in ("TensorArray", "TensorArrayGrad"):
            if op == "TensorArray":
                ref = TARef(i, at.get("accumulate", False), at.get("dynamic_size", True))
                length = jnp.asarray(vals[0]).astype(jnp.int32).reshape(())
                if _concrete(vals[0]):      # the first guess of what a TensorArrayStack stacks
                    self.ta_sizes[i] = int(vals[0])
            else:
                fwd = vals[0]
                if not isinstance(fwd, TARef):
                    raise NotLowerable("the gradient of a TensorArray the prototype cannot follow", node=node.name)
                ref = TARef(i, True, True, grad=True)
                self.stack_avals.setdefault(i, self.stack_avals.get(fwd.node))
                length = state[f"t{fwd.node}"][2] if f"t{fwd.node}" in state else jnp.int32(0)
            es = at.get("element_shape")
            if es is not None and None not in es and i not in self.stack_avals:
                self.stack_avals[i] = (tuple(es), np.dtype(at["dtype"]))
            if not self.discover:
                known = self.stack_avals.get(i)
                if known is None:
                    raise NotLowerable("a TensorArray whose element shape is never known", node=node.name)
                cap = self.caps[i]
                state[f"t{i}"] = (jnp.zeros((cap,) + known[0], np.dtype(at["dtype"])), jnp.zeros(cap, bool),
                                  length, length)
            return [ref, flow]
        ref = vals[0]
        if not isinstance(ref, TARef):
            raise NotLowerable(f"{op} on a TensorArray the prototype cannot follow", node=node.name)
        t = ref.node
        if op in ("TensorArrayWrite", "TensorArrayUnstack"):
            x = jnp.asarray(vals[2] if op == "TensorArrayWrite" else vals[1])
            elem = x.shape if op == "TensorArrayWrite" else x.shape[1:]
            if self.discover:
                known = self.stack_avals.setdefault(t, (elem, x.dtype))
                if known[0] != elem:
                    raise NotLowerable("writes of different shapes into one TensorArray", node=node.name)
                return [flow]
            buf, written, length, high = state[f"t{t}"]
            cap = buf.shape[0]
            lv = lits.value(L)
            on = True if lv is True else lv
            if op == "TensorArrayWrite":
                idx = jnp.asarray(vals[1]).astype(jnp.int32).reshape(())
                at_ = idx if lv is True else jnp.where(lv, idx, cap)
                top = idx + 1
                bad = (idx < 0) | (written.at[idx].get(mode="clip") & (idx < cap) & (not ref.accumulate))
                buf = buf.at[at_].add(x, mode="drop") if ref.accumulate else buf.at[at_].set(x, mode="drop")
                written = written.at[at_].set(True, mode="drop")
            else:
                n = x.shape[0]
                if n > cap:            # static: ask for a larger buffer
                    state[f"t{t}"] = (buf, written, length, jnp.maximum(high, n))
                    return [flow]
                rows = jnp.arange(n) if lv is True else jnp.where(lv, jnp.arange(n), cap)
                buf = buf.at[rows].add(x, mode="drop") if ref.accumulate else buf.at[rows].set(x, mode="drop")
                top = jnp.int32(n)
                bad = jnp.any(written[:n]) & (not ref.accumulate)
                written = written.at[rows].set(True, mode="drop")
            if not ref.dynamic:
                bad = bad | (top > length)
            grown = jnp.maximum(length, top)
            length = grown if lv is True else jnp.where(lv, grown, length)
            state["ta_error"] = state["ta_error"] | (on & bad)
            state[f"t{t}"] = (buf, written, length, jnp.maximum(high, length))
            return [flow]
        known = self.stack_avals.get(t)
        if known is None:
            raise NotLowerable("a TensorArray read before anything is written to it", node=node.name)
        lv = lits.value(L)
        on = True if lv is True else lv
        if op == "TensorArraySize":
            return [jnp.int64(0) if self.discover else state[f"t{t}"][2].astype(jnp.int64)]
        if op == "TensorArrayRead":
            if self.discover:
                return [jnp.zeros(*known)]
            buf, written, length, high = state[f"t{t}"]
            idx = jnp.asarray(vals[1]).astype(jnp.int32).reshape(())
            if not ref.accumulate:
                state["ta_error"] = state["ta_error"] | (on & ((idx < 0) | (idx >= length)
                                                                | ~written.at[idx].get(mode="clip")))
            return [buf.at[idx].get(mode="clip")]
        # TensorArrayStack: XLA needs its length statically; the run reports the real one (program.py)
        if self.depth:
            raise NotLowerable("TensorArrayStack inside a loop (its length would change per iteration)",
                               node=node.name)
        n = self.ta_lengths.get(i, self.ta_sizes.get(t, 0))
        if self.discover:
            return [jnp.zeros((n,) + tuple(known[0]), known[1])]
        buf, written, length, high = state[f"t{t}"]
        if n > buf.shape[0]:
            state[f"t{t}"] = (buf, written, length, jnp.maximum(high, n))
            return [jnp.zeros((n,) + buf.shape[1:], buf.dtype)]
        if not ref.accumulate:
            state["ta_error"] = state["ta_error"] | (on & ~jnp.all(written[:n]))
        self.stacked[i] = (np.int32(n), length)
        return [buf[:n]]

    def _var(self, node, vals, L, state, lits):
        op = node.op
        if op == "VarHandle":
            key = var_key(node)
            if key not in state:                   # not in the container yet: made from its init
                state[key] = jnp.asarray(vals[0])
            return VarRef(key)
        ref = vals[0]
        if not isinstance(ref, VarRef):
            raise NotLowerable(f"{op} on a Variable the prototype cannot follow", node=node.name)
        old = state[ref.key]
        if op == "ReadVariable":
            return old
        v = jnp.asarray(vals[1])
        new = v if op == "Assign" else old + v if op == "AssignAdd" else old - v
        if new.shape != old.shape or new.dtype != old.dtype:
            raise DfcRuntimeError(f"cannot assign {new.dtype}{list(new.shape)} to variable of "
                                  f"{old.dtype}{list(old.shape)}", node=node.name)
        lv = lits.value(L)
        state[ref.key] = new if lv is True else jnp.where(lv, new, old)
        return new

    # ------------------------------------------------------------------ loop frames
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

            def skipped(st):
                return [jnp.zeros(s.shape, s.dtype) for s in shapes[0]], st
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
        nexts = [p.ins[[s for s, _ in p.ins[m] if p.kind[s] == NEXT][0]][0] for m in a.merges]
        pred_ref = p.ins[a.loop_cond][0]

        def setup(mv):
            env = dict(base)
            for m, v in zip(a.merges, mv):
                env[(m, 0)] = v
            live = {k: TRUE for k in env}
            return env, live, Literals()

        def predicate(env, live, st):
            if live.get(pred_ref, DEAD) != TRUE:
                raise NotLowerable("a loop predicate that a cond may make dead", node=p.nodes[a.loop_cond].name)
            return jnp.reshape(jnp.asarray(env[pred_ref]), ()).astype(bool)

        def cond_fun(carry):
            mv, st = carry
            env, live, lits = setup(mv)
            self.eval_items(pre, a, env, live, dict(st), lits, pure=True)
            return predicate(env, live, st) & jnp.logical_not(st["poison"])

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
            return tuple(out), st

        self.depth += 1
        try:
            if self.discover:           # one iteration, abstractly: what the body pushes, and that shapes hold
                body_fun((tuple(init), dict(state)))
                final, st = tuple(init), dict(state)
            else:
                final, st = lax.while_loop(cond_fun, body_fun, (tuple(init), dict(state)))
        finally:
            self.depth -= 1
        outs = []
        for e in a.exits:
            outs.append(final[a.merges.index(a.switches[p.ins[e][0][0]])])
        return outs, st


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


def _array(v):
    return _concrete(v) or isinstance(v, jax.Array) or hasattr(v, "aval")
