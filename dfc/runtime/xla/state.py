"""The run's state in the XLA lowering: gradient stacks, TensorArrays and Variables (see lower.py)."""
import numpy as np

import jax.numpy as jnp
from jax import lax

from dfc.errors import DfcRuntimeError
from dfc.runtime.xla import checks
from dfc.runtime.xla.jops import NotLowerable

_STACK_OPS = ("StackV2", "StackPush", "StackPop")
_VAR_OPS = ("VarHandle", "ReadVariable", "Assign", "AssignAdd", "AssignSub")
_TA_OPS = ("TensorArray", "TensorArrayGrad", "TensorArrayWrite", "TensorArrayRead", "TensorArraySize",
           "TensorArrayStack", "TensorArrayUnstack")
STATE_OPS = _STACK_OPS + _VAR_OPS + _TA_OPS


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


class StateOps:
    """Lowerer's kernels of the stateful ops: each takes the node's inputs and liveness and updates
    `state` (a dict of JAX values carried through every loop)."""

    def state_op(self, node, i, vals, L, state, lits):
        if node.op in _TA_OPS:
            return self._ta(node, i, vals, L, state, lits)
        if node.op in _STACK_OPS:
            return [self._stack(node, i, vals, L, state, lits)]
        return [self._var(node, vals, L, state, lits)]

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
        checks.fail(state, lits, L, cnt < 0, i, checks.EMPTY)
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
            if op == "TensorArrayWrite":
                idx = jnp.asarray(vals[1]).astype(jnp.int32).reshape(())
                at_ = idx if lv is True else jnp.where(lv, idx, cap)
                top = idx + 1
                checks.fail(state, lits, L, idx < 0, i, checks.NEGATIVE, idx)
                if not ref.dynamic:
                    checks.fail(state, lits, L, idx >= length, i, checks.OUT_OF_RANGE, idx, length)
                if not ref.accumulate:
                    checks.fail(state, lits, L, written.at[idx].get(mode="clip") & (idx >= 0) & (idx < cap), i,
                                checks.TWICE, idx)
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
                # the kernel writes rows 0, 1, ...: the first row written before, or the first past a fixed size
                past = (n > length) if not ref.dynamic else jnp.bool_(False)
                if not ref.accumulate and n:
                    row = jnp.argmax(written[:n])
                    checks.fail(state, lits, L, jnp.any(written[:n]) & (~past | (row < length)), i, checks.TWICE, row)
                checks.fail(state, lits, L, past, i, checks.OUT_OF_RANGE, length, length)
                written = written.at[rows].set(True, mode="drop")
            grown = jnp.maximum(length, top)
            length = grown if lv is True else jnp.where(lv, grown, length)
            state[f"t{t}"] = (buf, written, length, jnp.maximum(high, length))
            return [flow]
        known = self.stack_avals.get(t)
        if known is None:
            raise NotLowerable("a TensorArray read before anything is written to it", node=node.name)
        if op == "TensorArraySize":
            return [jnp.int64(0) if self.discover else state[f"t{t}"][2].astype(jnp.int64)]
        if op == "TensorArrayRead":
            if self.discover:
                return [jnp.zeros(*known)]
            buf, written, length, high = state[f"t{t}"]
            idx = jnp.asarray(vals[1]).astype(jnp.int32).reshape(())
            if not ref.accumulate:
                checks.fail(state, lits, L, idx < 0, i, checks.NEGATIVE, idx)
                checks.fail(state, lits, L, idx >= length, i, checks.OUT_OF_RANGE, idx, length)
                checks.fail(state, lits, L, ~written.at[idx].get(mode="clip"), i, checks.UNWRITTEN, idx)
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
        if not ref.accumulate and n:
            checks.fail(state, lits, L, ~jnp.all(written[:n]), i, checks.UNWRITTEN, jnp.argmin(written[:n]))
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
