"""Chains of pure kernels run as one task on the general path (keeps §4.3's overlap cheap).

On the general tagged-frame path every heavy kernel is a round trip: the scheduler thread hands it
to the kernel pool, the pool thread hands the result back, and the scheduler does its bookkeeping
(pending inputs, the ready queue) before it hands over the next kernel. On a 2-core machine a pool
thread waits 100-300 us for that between two dependent kernels, and longer when the scheduler thread
has to wait for a core. In a loop that overlaps iterations (overlap.py) with parallel_iterations=2,
each iteration's chain of kernels runs on one pool thread; those waits are where the cores idle
(benchmarks/parallel_iterations.py: the trace of such a run shows each pool thread idle 5-10%).

A chain is a path of nodes n1 -> n2 -> ... -> nk in one loop frame where every member but the last
has exactly one consumer, the next member, and every member's other inputs are ready no later than
n1's: a loop invariant (a constant Enter of the frame), a Const, or a value that n1 or an earlier
member already takes. `matmul -> tanh -> matmul -> tanh -> sum` with the invariant weight is one.
The plan gives n1 a kernel that calls the k kernels in turn (`ChainKernel`), all the chain's inputs
and nk's output edges; n2..nk never run on their own. So a chain costs one scheduler round trip.

Nothing a user sees changes: each kernel gets the same inputs in the same order; a dead input makes
the chain's output dead, as it made every node after it dead; an error names the member that
failed; a traced run (trace.py) still has one span per member. Members are plain stateless kernels
only (not fetched or fed, no control edges inside the chain, not stateful, asynchronous, a transfer
or an op that reads the iteration tag). Plan uses chains only for loop frames on the general path
of a run with a kernel pool and without byte accounting (whose counts follow each node), and not
with DFC_CHAINS=0 in the environment (each kernel its own task, as before: for comparisons).
"""
from dfc.ir import ops as opreg
from dfc.ir.graph import parse_input
from dfc.runtime.limits import kernel_error
from dfc.runtime.fused import _TAGGED_OPS     # ops whose kernels read the iteration tag (ctx.tag)
from dfc.runtime.overlap import static_types

from dfc.ir.kinds import NORMAL, MERGE, ENTER


class ChainKernel:
    """The kernel of a chain's first node: `(ctx, args)` -> the last member's outputs. `args` are the
    chain's inputs; each step takes its arguments from them by index, or (-1) the previous member's
    value. `with_kernels(fn)` gives the same chain over other member kernels (trace.py's spans)."""
    __slots__ = ("members", "nodes", "kernels", "specs", "ports", "tagged")

    def __init__(self, members, nodes, kernels, specs, ports, tagged=False):
        self.members, self.nodes, self.kernels, self.specs, self.ports = members, nodes, kernels, specs, ports
        self.tagged = tagged

    def __call__(self, ctx, args, tag=None):
        v = outs = None
        for node, kern, spec, port in zip(self.nodes, self.kernels, self.specs, self.ports):
            a = [v if s < 0 else args[s] for s in spec]
            try:
                outs = kern(ctx, a, tag) if self.tagged else kern(ctx, a)
            except Exception as e:   # noqa: BLE001 — named after the member that failed
                raise kernel_error(node, e) from None
            if port >= 0:
                v = outs[port]
        return outs

    def with_kernels(self, wrap):
        """The chain with each member's kernel replaced by wrap(member index, kernel); its calls pass the
        iteration tag on (a traced kernel's third argument)."""
        return ChainKernel(self.members, self.nodes, [wrap(i, k) for i, k in zip(self.members, self.kernels)],
                           self.specs, self.ports, tagged=True)


def build_chains(plan, fids, heavy_elements):
    """Rewrite `plan`'s tables so each chain in the frames `fids` runs as its first node; returns
    ({first node: [members]}, {first nodes of chains that go to the pool whatever their inputs' size}).

    The executor sends a kernel to the pool when its inputs have >= heavy_elements elements; a chain goes
    by its own inputs, so a member that makes a large value from small ones (a Fill, a broadcast) would
    keep the heavy member after it off the pool. So a heavy member joins a chain only where the static
    types give its inputs' sizes, and a chain with a member whose inputs reach heavy_elements always goes
    to the pool."""
    members = [i for i in _order(plan, fids) if _eligible(plan, i)]
    eligible = set(members)
    types = static_types(plan.graph)
    taken, chains, pooled = set(), {}, set()
    for head in members:
        if head in taken:
            continue
        chain = [head]
        inputs = list(plan.ins[head])      # the chain's data inputs, by slot
        cur, big = head, False
        while True:
            nxt = _sole_consumer(plan, cur)
            if nxt is None or nxt not in eligible or nxt in taken or plan.fid[nxt] != plan.fid[head] \
                    or plan.ctrl_ins[nxt] or not all(s == cur or (s, p) in inputs or _early(plan, s)
                                                    for s, p in plan.ins[nxt]):
                break
            if plan.heavy[nxt]:
                size = _input_elements(plan.nodes[nxt], types)
                if size is None:
                    break
                big = big or size >= heavy_elements
            chain.append(nxt)
            inputs += [sp for sp in plan.ins[nxt] if sp[0] != cur and sp not in inputs]
            cur = nxt
        if len(chain) > 1:
            taken.update(chain)
            _rewrite(plan, chain)
            chains[head] = chain
            if big:
                pooled.add(head)
    return chains, pooled


def _input_elements(node, types):
    """The elements of node's data inputs by the static types, or None where a shape is unknown."""
    total = 0
    for ref in node.data_inputs:
        name, port, _ = parse_input(ref)
        t = types.get(name)
        if t is None or port >= len(t) or t[port] is None or t[port].shape is None:
            return None
        k = 1
        for d in t[port].shape:
            if d is None:
                return None
            k *= d
        total += k
    return total


def _order(plan, fids):
    """The nodes of frames `fids`, inputs before consumers (NextIteration edges left out: no chain
    crosses a Merge)."""
    nodes = [i for i in range(len(plan.nodes)) if plan.fid[i] in fids]
    inside = set(nodes)
    indeg = {i: sum(1 for s, _ in plan.ins[i] if s in inside) + sum(1 for s in plan.ctrl_ins[i] if s in inside)
             for i in nodes if plan.kind[i] != MERGE}      # a Merge's back edge would make a cycle
    for i in nodes:
        if plan.kind[i] == MERGE:
            indeg[i] = 0
    ready = [i for i in nodes if indeg[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for port in plan.out_edges[i]:
            for dst, _ in port:
                if dst in indeg and plan.kind[dst] != MERGE:
                    indeg[dst] -= 1
                    if indeg[dst] == 0:
                        ready.append(dst)
        for dst in plan.ctrl_outs[i]:
            if dst in indeg and plan.kind[dst] != MERGE:
                indeg[dst] -= 1
                if indeg[dst] == 0:
                    ready.append(dst)
    return order


def _eligible(plan, i):
    if plan.kind[i] != NORMAL or plan.kern[i] is None or i in plan.fetch_nodes:     # a fed node has no kernel
        return False
    op = plan.nodes[i].op
    d = opreg.get(op)
    return not (d.stateful or d.async_kernel or d.in_executor or op in _TAGGED_OPS or op in ("Send", "Recv", "Const"))


def _sole_consumer(plan, i):
    """The one node that takes node i's value, when i has one consumer along one data edge."""
    if plan.ctrl_outs[i]:
        return None
    edges = [e for port in plan.out_edges[i] for e in port]
    return edges[0][0] if len(edges) == 1 else None


def _early(plan, s):
    """Whether node s's value is there when its iteration starts (a loop invariant) or from a Const."""
    return (plan.kind[s] == ENTER and plan.is_constant[s]) or plan.nodes[s].op == "Const"


def _rewrite(plan, chain):
    head, tail = chain[0], chain[-1]
    inputs = list(plan.ins[head])
    specs, ports = [list(range(len(inputs)))], []
    for prev, node in zip(chain, chain[1:]):
        ports.append(next(p for p, edges in enumerate(plan.out_edges[prev]) if edges))
        spec = []
        for slot, (s, p) in enumerate(plan.ins[node]):
            if s == prev:
                spec.append(-1)
                continue
            if (s, p) not in inputs:
                inputs.append((s, p))
                plan.out_edges[s][p].append((head, len(inputs) - 1))
            spec.append(inputs.index((s, p)))
            plan.out_edges[s][p].remove((node, slot))
        specs.append(spec)
    ports.append(-1)
    added = len(inputs) - len(plan.ins[head])
    need, nin = plan.arity[head]
    plan.arity[head] = (need + added, nin + added)
    plan.ins[head] = inputs
    plan.kern[head] = ChainKernel(list(chain), [plan.nodes[i] for i in chain], [plan.kern[i] for i in chain],
                                  specs, ports)
    plan.heavy[head] = any(plan.heavy[i] for i in chain)
    plan.out_edges[head] = plan.out_edges[tail]
    plan.ctrl_outs[head] = plan.ctrl_outs[tail]
    for port, edges in enumerate(plan.out_edges[head]):     # the consumers now take the value from the head
        for dst, slot in edges:
            if slot < len(plan.ins[dst]) and plan.ins[dst][slot] == (tail, port):
                plan.ins[dst][slot] = (head, port)
    for dst in plan.ctrl_outs[head]:
        plan.ctrl_ins[dst] = [head if s == tail else s for s in plan.ctrl_ins[dst]]
    for i in chain[1:]:
        plan.out_edges[i] = [[] for _ in plan.out_edges[i]]
        plan.ctrl_outs[i] = []
        plan.ins[i] = []
