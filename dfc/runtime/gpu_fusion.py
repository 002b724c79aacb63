"""Elementwise chains of a fused loop frame on a GPU run as one kernel (issue 14, "fast GPU loops").

In a fused frame (dfc/runtime/fused.py) on a device whose values live in device memory (`gpu:N`, and
`strict:N`, the cupy double of dfc/runtime/strict.py), every op is a kernel launch. Here maximal
chains of elementwise ops (the ops of TEMPLATES: arithmetic, comparisons, logic, unary math, Where,
Cast, and Identity-like ops between them) become one generated Python function written with the array
module's ufuncs, wrapped with `xp.fuse`: cupy.fuse traces it and compiles one CUDA kernel per input
dtypes, so a chain of k ops is one launch instead of k, and its intermediates are never written to
device memory. A chain member whose value is needed outside the chain (another op, a NextIteration, a
gradient stack push, a nested loop, a control edge) is an output of the kernel, so nothing needed
elsewhere is fused away.

Why cupy.fuse and not a hand-written cupy.ElementwiseKernel: fuse resolves every op's dtype with
cupy's own ufunc rules (the ones the unfused kernels use, Python scalars weak), and the generated
function calls the same ufuncs the unfused kernels call, so dtypes agree with the unfused path by
construction; an ElementwiseKernel would need dfc to re-derive cupy's promotion and write C for each
op (C's rounding, floor and NaN rules differ from numpy's in places). Caveat on a real GPU: NVRTC
contracts a multiply followed by an add into one FMA by default (cupy.fuse passes no --fmad=false), so
fused float results may differ from unfused cupy in the last bit; on the strict double they are
identical.

A chain is grouped only when it is exact: its members run in the same part of the iteration (before
or after the loop predicate), no value leaves the chain and comes back through another op (convex),
and every output depends on the same values a cond can make dead (so "any input dead -> all outputs
dead" is what the unfused code does). cupy broadcasts all outputs of a kernel to the shape of all its
inputs; when an output depends on only some inputs and their shapes would disagree, that call runs
unfused. If the fused kernel raises, the chain runs unfused (which raises the node's own error if the
error is real) and stays unfused from then on (`Chain.broken` says why).

Off with DFC_FUSE_ELEMENTWISE=0 (read when a Session builds its plans); never on cpu/accel devices
(numpy), under a memory_limit (the per-kernel checks) or in traced builds (one span per kernel).
"""

import numpy as np

from dfc import config
from dfc.ir.kinds import NORMAL
from dfc.runtime import emit as E
from dfc.runtime.limits import kernel_error

ENV = "DFC_FUSE_ELEMENTWISE"

# op -> (number of inputs, expression over {0}, {1}, {2}) written like the op's unfused kernel
# (dfc/runtime/kernels/math_kernels.py) with ufuncs only, as cupy.fuse requires.
TEMPLATES = {
    "Add": (2, "xp.add({0}, {1})"), "Sub": (2, "xp.subtract({0}, {1})"), "Mul": (2, "xp.multiply({0}, {1})"),
    "Div": (2, "xp.true_divide({0}, {1})"), "Maximum": (2, "xp.maximum({0}, {1})"),
    "Minimum": (2, "xp.minimum({0}, {1})"),
    "Less": (2, "xp.less({0}, {1})"), "LessEqual": (2, "xp.less_equal({0}, {1})"),
    "Greater": (2, "xp.greater({0}, {1})"), "GreaterEqual": (2, "xp.greater_equal({0}, {1})"),
    "Equal": (2, "xp.equal({0}, {1})"), "NotEqual": (2, "xp.not_equal({0}, {1})"),
    "LogicalAnd": (2, "xp.logical_and({0}, {1})"), "LogicalOr": (2, "xp.logical_or({0}, {1})"),
    "LogicalNot": (1, "xp.logical_not({0})"),
    "Neg": (1, "xp.negative({0})"), "Abs": (1, "xp.abs({0})"), "Sign": (1, "xp.sign({0})"),
    "Square": (1, "xp.square({0})"), "Sqrt": (1, "xp.sqrt({0})"), "Rsqrt": (1, "xp.true_divide(1, xp.sqrt({0}))"),
    "Reciprocal": (1, "xp.true_divide(1, {0})"), "Exp": (1, "xp.exp({0})"), "Log": (1, "xp.log({0})"),
    "Log1p": (1, "xp.log1p({0})"), "Sin": (1, "xp.sin({0})"), "Cos": (1, "xp.cos({0})"),
    "Tanh": (1, "xp.tanh({0})"), "Floor": (1, "xp.floor({0})"), "Ceil": (1, "xp.ceil({0})"),
    "IsFinite": (1, "xp.isfinite({0})"),
    # the unfused kernel: t = x * h; tanh(t); t *= h; t += h with h = 0.5 in x's dtype (Sigmoid is float only)
    "Sigmoid": (1, "xp.add(xp.multiply(xp.tanh(xp.multiply({0}, {0}.dtype.type(0.5))), {0}.dtype.type(0.5)), "
                   "{0}.dtype.type(0.5))"),
    "Relu": (1, "xp.maximum({0}, {0}.dtype.type(0))"),
    "Where": (3, "xp.where({0}, {1}, {2})"),
    "Cast": (1, "{0}.astype({1})"),      # {1}: the target dtype, passed to the function as data
    "Identity": (1, "{0}"), "StopGradient": (1, "{0}"),
}
_PASS = frozenset({"Identity", "StopGradient"})     # members that launch nothing; they never start a chain


def enabled():
    """False when DFC_FUSE_ELEMENTWISE is 0/false/no/off."""
    return config.env(ENV)


def wanted(plan):
    """Whether fused frames of `plan` group elementwise chains: a device-array device (gpu, strict) whose
    array module has `fuse`, no memory_limit, and the switch on."""
    d = plan.device
    return (d is not None and d.device_arrays and plan.memory_limit is None and enabled()
            and hasattr(d.xp, "fuse"))


class Chain:
    """One elementwise chain: `members` (node indices, in order), `args` ((node, port) of the values it
    reads, in order), `outputs` (members whose values are used outside). Called with the argument
    values, returns the outputs' values (a tuple) from one fused kernel, or unfused (see the module
    docstring)."""

    def __init__(self, plan, members, args, outputs, xp):
        self.plan, self.members, self.args, self.outputs = plan, members, args, outputs
        self.broken = None
        slot = {a: k for k, a in enumerate(args)}
        deps, steps, lines = {}, [], E.Lines()
        env = {"xp": xp}
        for i in members:
            ins = []
            for src in plan.ins[i]:
                if src in slot:
                    ins.append(slot[src])
                    deps.setdefault(i, set()).add(slot[src])
                else:
                    ins.append(len(args) + members.index(src[0]))
                    deps.setdefault(i, set()).update(deps[src[0]])
            op = plan.nodes[i].op
            fn = (lambda x: x) if op in _PASS else getattr(plan.kern[i], "direct", None) or _call(plan.kern[i])
            steps.append((i, fn, ins))
            names = [E.ident("a", k) if k < len(args) else E.ident("t", members[k - len(args)]) for k in ins]
            if op == "Cast":
                names.append(E.ident("dtype", i))
                env[names[-1]] = np.dtype(plan.nodes[i].attrs["dtype"])
            lines.w(E.indent(0), "{} = {}    # node {}", E.ident("t", i), E.subst(TEMPLATES[op][1], *names), E.lit(i))
        self.steps, self.lines = steps, lines
        self.out_slots = [len(args) + members.index(o) for o in outputs]
        every = set(range(len(args)))
        # outputs that do not read every argument: cupy would broadcast them to all arguments' shape
        self.partial = [sorted(deps.get(o, ())) for o in outputs if deps.get(o, set()) != every]
        src = E.Lines()
        src.w(E.indent(0), "def chain({}):", E.join(", ", [E.ident("a", k) for k in range(len(args))]))
        for line in lines:
            src.w(E.indent(1), "{}", line)
        src.w(E.indent(1), "return ({})", E.join("", [E.fmt("{}, ", E.ident("t", o)) for o in outputs]))
        self.source = E.source(src)
        self.fused = xp.fuse(E.run(self.source, env, "elementwise chain")["chain"])

    def __call__(self, *args):
        if self.broken is None and (not self.partial or self._same_shapes(args)):
            try:
                return self.fused(*args)
            except Exception as e:     # noqa: BLE001 — run unfused: a real error is raised there, by its node
                out = self.unfused(*args)
                if not isinstance(e, MemoryError):
                    self.broken = f"{type(e).__name__}: {e}"
                return out
        return self.unfused(*args)

    def _same_shapes(self, args):
        shapes = [getattr(a, "shape", ()) for a in args]
        try:
            full = np.broadcast_shapes(*shapes)
            return all(np.broadcast_shapes(*[shapes[k] for k in ks]) == full for ks in self.partial)
        except ValueError:
            return False

    def unfused(self, *args):
        """The chain's ops one kernel each (the fused path's results, and its errors, by node)."""
        vals = list(args)
        for i, fn, ins in self.steps:
            try:
                vals.append(fn(*[vals[k] for k in ins]))
            except Exception as e:     # noqa: BLE001
                raise kernel_error(self.plan.nodes[i], e) from None
        return tuple(vals[k] for k in self.out_slots)


def group(prog, order, deps, body, maybe_dead, producer, inplace):
    """Chains of the frame whose items are `order` (see fused.FrameAnalysis): returns (new order, {k: Chain}).
    Each chain of two or more kernels replaces its members' items by one item ("chain", k); `body` and
    `maybe_dead` get the chain items whose members were in them."""
    p = prog.plan
    pos = {it: k for k, it in enumerate(order)}
    children = {it: set() for it in order}
    for it, ds in deps.items():
        for d in ds:
            if d in children:
                children[d].add(it)
    desc = {}
    for it in reversed(order):
        m = 0
        for c in children[it]:
            m |= (1 << pos[c]) | desc[c]
        desc[it] = m

    def candidate(it):
        if it[0] != "node":
            return False
        i = it[1]
        op = p.nodes[i].op
        return (op in TEMPLATES and p.kind[i] == NORMAL and i not in inplace and not p.ctrl_ins[i]
                and len(p.out_edges[i]) == 1 and len(p.ins[i]) == TEMPLATES[op][0]
                and (op in _PASS or op == "Cast" or getattr(p.kern[i], "direct", None) is not None))

    def item_of(s):
        return producer.get(s, ("node", s))

    def valid(members):
        mask = 0
        for i in members:
            mask |= 1 << pos[("node", i)]
        if len({("node", i) in body for i in members}) > 1:
            return False
        reach = 0
        for i in members:
            reach |= desc[("node", i)]
        outside = reach & ~mask
        while outside:                       # convex: nothing outside is both below and above a member
            low = outside & -outside
            if desc[order[low.bit_length() - 1]] & mask:
                return False
            outside ^= low
        deadable = {}                        # member -> the inputs a cond may make dead that it reads
        outs = []
        for i in sorted(members, key=lambda i: pos[("node", i)]):
            d = set()
            for s, port in p.ins[i]:
                if s in members:
                    d |= deadable[s]
                elif item_of(s) in maybe_dead:
                    d.add((s, port))
            deadable[i] = d
            if _used_outside(p, i, members):
                outs.append(i)
        return len({frozenset(deadable[o]) for o in outs}) <= 1

    group_of, groups, nextg = {}, {}, 0
    for it in order:
        if not candidate(it):
            continue
        i = it[1]
        prods = []
        for s, _ in p.ins[i]:
            g = group_of.get(s)
            if g is not None and g not in prods:
                prods.append(g)
        options = []
        if prods:
            options.append(set().union(*(groups[g] for g in prods)) | {i})
            options.extend(groups[g] | {i} for g in sorted(prods, key=lambda g: -len(groups[g])) if len(prods) > 1)
        chosen = next((o for o in options if valid(o)), None)
        if chosen is None:
            if p.nodes[i].op in _PASS:
                continue
            chosen = {i}
        for g in {group_of[m] for m in chosen if m in group_of}:
            del groups[g]
        groups[nextg] = chosen
        for m in chosen:
            group_of[m] = nextg
        nextg += 1

    chains, replaced = {}, {}
    for members in groups.values():
        if sum(p.nodes[i].op not in _PASS for i in members) < 2:
            continue
        ordered = sorted(members, key=lambda i: pos[("node", i)])
        args = []
        for i in ordered:
            for src in p.ins[i]:
                if src[0] not in members and src not in args:
                    args.append(src)
        outputs = [i for i in ordered if _used_outside(p, i, members)]
        k = len(chains)
        chains[k] = Chain(p, ordered, args, outputs, p.device.xp)
        for i in ordered:
            replaced[("node", i)] = ("chain", k)
    if not chains:
        return order, chains
    # the contracted items, in a new dependency order
    items, new_deps = [], {}
    for it in order:
        new = replaced.get(it, it)
        if new not in new_deps:
            items.append(new)
            new_deps[new] = set()
        new_deps[new].update(replaced.get(d, d) for d in deps.get(it, ()))
        new_deps[new].discard(new)
        if it in body:
            body.add(new)
        if it in maybe_dead:
            maybe_dead.add(new)
    from dfc.runtime.fused import _toposort
    return _toposort(items, new_deps), chains


def _call(kern):
    return lambda *xs: kern(None, xs)[0]


def _used_outside(p, i, members):
    return bool(p.ctrl_outs[i]) or any(d not in members for d, _ in p.out_edges[i][0])


def emit(prog, L, ind, it, a):
    """The lines of chain item `it` in frame analysis `a`'s function."""
    from dfc.runtime.fused import any_dead
    chain = a.chains[it[1]]
    w = L.w
    name = E.ident("ch", a.fid, it[1])
    prog.helpers[name] = chain
    w(ind, "# elementwise chain, one kernel: nodes {}", E.join(", ", [E.lit(i) for i in chain.members]))
    for line in chain.lines:
        w(ind, "#  {}", line)
    args = [prog._ref(s, a) for s in chain.args]
    outs = [E.ident("v", o, 0) for o in chain.outputs]
    pad = ind
    if it in a.maybe_dead:
        w(ind, "if {}:", any_dead(args))
        w(ind, "    {} = DEAD", E.join(" = ", outs))
        w(ind, "else:")
        pad = E.deeper(ind)
    w(pad, "_n = {}", E.lit(chain.members[-1]))
    w(pad, "{}, = {}({})", E.join(", ", outs), name, E.join(", ", args))
