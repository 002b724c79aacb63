"""Which loop frames overlap their iterations instead of running fused (§4.3 on the fast path).

A fused frame (dfc/runtime/fused.py) runs its iterations back to back on the scheduler thread.
That is the fastest way to run many small ops, but it throws away the non-strict parallelism of
§4.3: a loop whose iterations do independent heavy work (GIL-releasing numpy: a matmul per
iteration) could run several iterations at once on the kernel pool. So a frame runs on the
general tagged-frame path, which overlaps up to `parallel_iterations` iterations (and overlaps
independent frames with each other), when

- the run has a kernel pool (num_threads > 0, not a GPU partition) and the frame's
  parallel_iterations is > 1, and
- the frame has heavy nodes OFF its loop recurrence whose static work adds up to at least
  OVERLAP_WORK elements (OpDef.cost for MatMul, else output elements; unknown dimensions count
  as 1, so a frame whose shapes are unknown stays fused). Work that already uses every core does
  not count: when BLAS runs multi-threaded (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS /
  MKL_NUM_THREADS unset or > 1: OpenBLAS then takes all cores), overlapping matmuls only
  oversubscribes the cores, so only the single-threaded numpy work (elementwise, reductions)
  counts.

A node is on the recurrence when it lies on a cycle through the frame's NextIteration edges
(h = tanh(h @ W) in an RNN): iteration k+1 cannot start it before iteration k finished it, so
overlapping iterations gains nothing there and the fused path stays. A node off it (work on
x[k], or a matmul whose result only flows into an accumulator) can run while the next iteration
starts. A frame that runs on the general path keeps its enclosing frames off the fused path too
(a fused frame calls the frames nested in it directly).

On the general path each chain of pure kernels (an iteration's matmul -> tanh -> matmul -> ... -> sum)
runs as one pool task (dfc/runtime/chains.py), so an iteration's dependent kernels do not wait for the
scheduler thread between them.

Both paths give identical values (the tests compare every path with the reference interpreter).
"""
from dfc.ir import ops as opreg

# Elements of work (multiply-adds for MatMul) per iteration below which the fused path wins: on a
# 2-core machine a pool round trip plus the general path's per-node bookkeeping cost more than a
# 192x192 matmul saves by overlapping (2.5x slower there), so overlap starts at about a 400^3
# matmul's worth of independent work (benchmarks/parallel_iterations.py measures both sides).
OVERLAP_WORK = 1 << 26

from dfc.ir.kinds import ENTER, EXIT


BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads():
    """How many threads numpy's BLAS uses, as far as the environment says (unset: all cores)."""
    import os
    for var in BLAS_THREAD_VARS:
        v = os.environ.get(var, "").strip()
        if v:
            try:
                return max(1, int(v.split(",")[0]))
            except ValueError:
                continue
    return os.cpu_count() or 1


def overlapping_frames(plan, reasons=None):
    """The frame ids (among plan.programs) that should run on the general path to overlap iterations;
    `reasons` (a dict) gets fid -> why, naming the heavy node."""
    types = static_types(plan.graph)
    multi_blas = blas_threads() > 1
    out = set()
    for fid in range(1, len(plan.frame_names)):
        if plan.max_par[fid] <= 1:
            continue
        node = _off_recurrence_heavy(plan, fid, types, multi_blas)
        if node is not None:
            out.add(fid)
            if reasons is not None:
                reasons[fid] = (f"runs on the general path to overlap iterations: heavy node {node!r} is off the "
                                f"loop recurrence, parallel_iterations={plan.max_par[fid]}")
    for fid in list(out):      # the frames enclosing one that overlaps cannot be fused either
        f = plan.frame_parent[fid]
        while f > 0:
            if f not in out and reasons is not None:
                reasons[f] = f"runs on the general path: the frame {plan.frame_names[fid]!r} nested in it overlaps"
            out.add(f)
            f = plan.frame_parent[f]
    return out


def static_types(graph):
    """The graph's static types by node name, or {} where they cannot be inferred (nothing is then known
    to be large: no frame counts as heavy here, no heavy member joins a chain in chains.py)."""
    try:
        return graph.infer_types()
    except Exception:       # noqa: BLE001
        return {}


def _work(node, types, multi_blas=False):
    opdef = opreg.get(node.op)
    outs = types.get(node.name)
    if not opdef.heavy or not outs:
        return 0
    if opdef.cost is not None:
        if multi_blas and node.op == "MatMul":
            return 0        # BLAS already spreads it over the cores
        from dfc.ir.graph import parse_input
        ins = []
        for ref in node.data_inputs:
            s, port, _ = parse_input(ref)
            t = types.get(s)
            ins.append(t[port] if t is not None and port < len(t) else None)
        try:
            return opdef.cost(node.attrs, ins, outs) or 0
        except Exception:       # noqa: BLE001 — a cost rule that cannot read these types: unknown work
            return 0
    n = 0
    for t in outs:
        if t is not None and t.shape is not None:
            k = 1
            for d in t.shape:
                k *= d or 1
            n += k
    return n


def _off_recurrence_heavy(plan, fid, types, multi_blas=False):
    """The name of the largest heavy node of frame fid that is on no cycle through the frame's NextIteration
    edges, when such nodes add up to >= OVERLAP_WORK elements of work; else None."""
    work = {i: _work(plan.nodes[i], types, multi_blas) for i in range(len(plan.nodes))
            if plan.fid[i] == fid and plan.kern[i] is not None}
    work = {i: w for i, w in work.items() if w}
    if sum(work.values()) < OVERLAP_WORK:
        return None
    on_cycle = _cyclic_nodes(plan, fid)
    off = {i: w for i, w in work.items() if i not in on_cycle}
    if sum(off.values()) < OVERLAP_WORK:
        return None
    return plan.nodes[max(off, key=lambda i: (off[i], -i))].name


def _inside(plan, fid):
    """Nodes of frame fid and the frames nested in it, except fid's Exits (they lead out of it)."""
    keep = set()
    for i in range(len(plan.nodes)):
        f = plan.fid[i]
        while f > 0 and f != fid:
            f = plan.frame_parent[f]
        if f == fid and not (plan.fid[i] == fid and plan.kind[i] == EXIT):
            keep.add(i)
    return keep


def _cyclic_nodes(plan, fid):
    """Nodes in a strongly connected component of more than one node (Tarjan, iterative) of the frame's
    graph: data and control edges, NextIteration -> Merge back edges included."""
    nodes = _inside(plan, fid)

    def succ(v):
        for edges in plan.out_edges[v]:
            for d, _ in edges:
                if d in nodes:
                    yield d
        for d in plan.ctrl_outs[v]:
            if d in nodes:
                yield d

    index, low, on_stack, stack, cyclic = {}, {}, set(), [], set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, succ(root))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, succ(w)))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cyclic.update(comp)
    return cyclic
