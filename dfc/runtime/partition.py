"""Placement and partitioning of a graph over devices (whitepaper §3.2.1-§3.2.2; paper §4.4, Figure 6).

place(graph, devices) gives every node a device:
  1. a node's own device scope (after the session's device map), checked to
     exist and to have a kernel for the op;
  2. colocation: a resource (variable, stack, TensorArray) and every node its
     handle flows to are one group on one device, so a handle never crosses;
  3. everything else by a greedy earliest-finish simulation: in topological
     order each heavy node goes to the device (among those in use) where it
     would finish first, counting a transfer cost for every input on another
     device (20 us within a process, 1 ms between the tasks of a cluster); a node whose work is below a transfer's latency stays with its
     first input (so a loop variable's Merge/Switch/Exit stay together). Sources (constants, inputs) go where
     their first consumer went.

partition(graph, where) rewrites the graph into one graph per device:
  - NextIteration moves to its Merge's device and an Enter is copied onto each
    device that consumes it, so values cross devices inside an iteration (or
    in the parent frame) only;
  - every device that has nodes in a loop frame gets a control-loop state
    machine for it (Figure 6): Enter -> Merge -> Switch(pred) -> Identity ->
    NextIteration -> Merge, whose Switch reads the frame's LoopCond (through a
    Recv when LoopCond is elsewhere). Each Recv inside the frame has a control
    input from that Merge, so it is started once per iteration; a nested
    frame's state machine is entered from its parent's;
  - every cross-device edge becomes Send -> Recv, one Recv per tensor per
    destination device; control edges cross as Send/Recv of a token;
  - each Recv waits for the other inputs its consumers wait for anyway, so it
    starts as late as they allow (whitepaper §5.2, recv_schedule.py).
"""
import re

import numpy as np

from dfc.errors import DfcGraphError
from dfc.ir import dtypes as dt
from dfc.ir import ops as opreg
from dfc.ir.graph import Graph, Node, ROOT_FRAME, parse_input
from dfc.ir.loops import LoopBuilder
from dfc.runtime.devices import canonical_name, split_task

RESOURCE_OPS = frozenset({"VarHandle", "StackV2", "TensorArray", "QueueHandle", "AccumulatorHandle"})
_OP_SECONDS = 1e-6            # fixed cost of running one node
_ELEMENT_SECONDS = 1e-9       # per output element of a heavy op, on a device of speed 1
_XFER_SECONDS = 20e-6         # latency of one Send/Recv
_XFER_BYTES_PER_SECOND = 4e9
_TASK_XFER_SECONDS = 1e-3     # latency of one Send/Recv between tasks (processes, maybe machines)
_TASK_XFER_BYTES_PER_SECOND = 1e9
ALAP_RECVS = True             # each Recv starts as late as its consumers allow (recv_schedule.py)


def _xfer_seconds(src_device, dst_device, nbytes):
    """What moving nbytes from one device to another costs: much more between tasks than within one."""
    if src_device in (None, dst_device):
        return 0.0
    if split_task(src_device)[0] != split_task(dst_device)[0]:
        return _TASK_XFER_SECONDS + nbytes / _TASK_XFER_BYTES_PER_SECOND
    return _XFER_SECONDS + nbytes / _XFER_BYTES_PER_SECOND


# ------------------------------------------------------------------------------------------ placement

def map_device(name, device_map, node=None):
    """The canonical device a node annotated `name` runs on after the session's device map."""
    d = canonical_name(name, node)
    return device_map.get(d, d)


def canonical_map(device_map):
    return {canonical_name(k): canonical_name(v) for k, v in (device_map or {}).items()}


def place(graph, devices, device_map=None, default_device="cpu:0", extra_devices=(), costs=None):
    """node name -> device name for every node of `graph` (see the module docstring). costs: node name ->
    seconds measured by an earlier run (trace.node_costs), used instead of the fixed cost model where given."""
    dmap = canonical_map(device_map)
    default = map_device(default_device, dmap)
    explicit = {}
    for n in graph.nodes.values():
        if n.device:
            d = map_device(n.device, dmap, n.name)
            if d != canonical_name(n.device, n.name) and not devices.exists(d):
                raise DfcGraphError(f"device map sends {canonical_name(n.device)} to {d}, which does not exist",
                                    node=n.name)
            devices.get(d, n.name)
            explicit[n.name] = d
    groups = _colocation_groups(graph)
    where = {}
    for members in groups:
        d = _group_device(graph, members, explicit)
        if d is not None:
            for m in members:
                where[m] = d
    for name, d in explicit.items():
        where.setdefault(name, d)
    _loop_state_follows_its_update(graph, where)
    for name, d in where.items():
        devices.get(d).check_op(graph.nodes[name])
    if len(where) < len(graph.nodes):
        cands = sorted(set(where.values()) | {default} | {map_device(d, dmap) for d in extra_devices})
        for d in cands:
            devices.get(d)
        _greedy(graph, devices, where, cands, default, groups, costs or {})
    return where


def _loop_state_follows_its_update(graph, where):
    """A loop variable none of whose machinery is placed (Enter, Merge, Switch, Identity, Exit,
    NextIteration) lives on the device of the placed node that computes its next value: state a task
    updates stays on that task, so the loop sends it only the predicate, not the value and back."""
    consumers = graph.consumers()
    for n in graph.nodes.values():
        if n.op != "NextIteration" or n.name in where:
            continue
        src = parse_input(n.data_inputs[0])[0] if n.data_inputs else None
        d = where.get(src)
        merges = [c for c, _ in consumers[n.name] if graph.nodes[c].op == "Merge"]
        if d is None or len(merges) != 1:
            continue
        m = graph.nodes[merges[0]]
        members = [n.name, m.name] + [parse_input(r)[0] for r in m.data_inputs
                                      if graph.nodes[parse_input(r)[0]].op == "Enter"]
        for sw, _ in consumers[m.name]:
            if graph.nodes[sw].op == "Switch":
                members.append(sw)
                members += [c for c, _ in consumers[sw] if graph.nodes[c].op in ("Identity", "Exit")]
        if all(x not in where for x in members):
            for x in members:
                where[x] = d


def _colocation_groups(graph):
    """Lists of node names joined by edges that carry a resource handle."""
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    types = graph.infer_types()
    for n in graph.nodes.values():
        for ref in n.data_inputs:
            src, port, _ = parse_input(ref)
            outs = types.get(src)
            if outs and port < len(outs) and outs[port].dtype == dt.HANDLE:
                parent[find(n.name)] = find(src)
    groups = {}
    joined = set(parent) | set(parent.values())        # the resource node itself belongs to its group
    for x in filter(joined.__contains__, graph.nodes):   # in graph order: deterministic placement
        groups.setdefault(find(x), []).append(x)
    return list(groups.values())


def _group_device(graph, members, explicit):
    for m in members:
        if graph.nodes[m].op in RESOURCE_OPS and m in explicit:
            return explicit[m]
    for m in members:
        if m in explicit:
            return explicit[m]
    return None


def _elements(t):
    if t is None or t.shape is None:
        return 1
    return int(np.prod([1 if d is None else d for d in t.shape])) if t.shape else 1


def _bytes(t):
    if t is None or t.dtype == dt.HANDLE:
        return 8
    return _elements(t) * np.dtype(t.dtype).itemsize


def _compute_seconds(node, out_types, in_types, device):
    opdef = opreg.get(node.op)
    if not opdef.heavy:
        return _OP_SECONDS
    if opdef.cost is not None:
        work = opdef.cost(node.attrs, in_types, out_types) or 1
    else:
        work = sum(_elements(t) for t in out_types) or 1
    return _OP_SECONDS + work * _ELEMENT_SECONDS / device.speed


def _greedy(graph, devices, where, cands, default, groups, costs):
    """Greedy earliest-finish placement of the nodes `where` does not place yet (whitepaper §3.2.1): a node's
    cost is what an earlier run measured (`costs`) or else the cost model's estimate."""
    types = graph.infer_types()
    group_of = {m: g for g in groups for m in g}
    free = {d: 0.0 for d in cands}
    finish = {}
    sources = []
    for n in graph.topo_order():
        srcs = []
        for ref in n.inputs:
            s, port, ctrl = parse_input(ref)
            if s in finish:
                srcs.append((s, 0 if ctrl else _bytes(types[s][port] if port < len(types[s]) else None)))
        fixed = where.get(n.name)
        if fixed is None and not srcs and n.name not in group_of:
            finish[n.name] = 0.0
            sources.append(n)
            continue
        if fixed is not None:
            options = [fixed]
        else:
            members = group_of.get(n.name, [n.name])
            options = [d for d in cands if all(devices.get(d).supports(graph.nodes[m].op) for m in members)]
            if not options:
                options = [default if devices.get(default).supports(n.op) else "cpu:0"]
        in_types = [types[parse_input(r)[0]][parse_input(r)[1]] for r in n.data_inputs
                    if parse_input(r)[0] in types and parse_input(r)[1] < len(types[parse_input(r)[0]])]
        first_in = where.get(srcs[0][0]) if srcs else None
        # Work smaller than a transfer's latency is not worth moving: it stays with its first input.
        measured = costs.get(n.name)

        def seconds(d):
            return measured / devices.get(d).speed if measured is not None else \
                _compute_seconds(n, types[n.name], in_types, devices.get(d))
        heavy = (measured is not None or opreg.get(n.op).heavy) and seconds(options[0]) > _XFER_SECONDS
        best = None
        for d in options:
            start = free.get(d, 0.0) if heavy else 0.0    # cheap ops follow their inputs
            for s, nbytes in srcs:
                sd = where.get(s, default if graph.nodes[s].op == "Placeholder" else None)   # feeds come from the chief
                arrive = finish[s] + _xfer_seconds(sd, d, nbytes)
                start = max(start, arrive)
            end = start + seconds(d)
            # A cheap op stays with its first input (a loop's Switch with the loop variable, not the
            # predicate); heavy ops go wherever they finish first.
            key = (end, d != first_in, d != default, d) if heavy else (d != first_in, end, d != default, d)
            if best is None or key < best[0]:
                best = (key, d, end)
        _, d, end = best
        if fixed is None:
            for m in group_of.get(n.name, [n.name]):
                where[m] = d
        if heavy:
            free[d] = end
        finish[n.name] = end
    consumers = graph.consumers()
    for n in sources:
        placed = [where[c] for c, _ in consumers[n.name] if c in where]
        ok = [d for d in placed if devices.get(d).supports(n.op)]
        where[n.name] = ok[0] if ok else default if devices.get(default).supports(n.op) else "cpu:0"


# ------------------------------------------------------------------------------------------ partitioning

class Partitioned:
    """The per-device graphs of one placed graph.

    graphs: device -> Graph; where: node name -> device (new nodes included);
    frame_ids: frame name -> id shared by all partitions (frame tags must agree).
    """

    def __init__(self, graphs, where, frame_ids):
        self.graphs, self.where, self.frame_ids = graphs, where, frame_ids

    def text(self):
        out = []
        for d, g in sorted(self.graphs.items()):
            out.append(f"# ---- partition {d}: {len(g.nodes)} nodes")
            out.append(g.text().rsplit("\n# outputs", 1)[0])
        return "\n".join(out)


def route(parts, fetches, feed_names, targets):
    """What each partition of one (fetches, feeds, targets) key does: (fetch_of: device -> its fetches,
    fetch_order: [(device, k)] for each fetch in order, feeds_of: device -> set of its fed nodes,
    targets_of: device -> its targets first, then every other node of its graph)."""
    where = parts.where
    fetch_of = {d: [] for d in parts.graphs}
    fetch_order = []
    for f in fetches:
        d = where[parse_input(f)[0]]
        fetch_order.append((d, len(fetch_of[d])))
        fetch_of[d].append(f)
    feeds_of = {d: {n for n in feed_names if where.get(n) == d} for d in parts.graphs}
    targets_of = {}
    for d, g in parts.graphs.items():
        mine = [t for t in targets if where.get(t) == d]
        targets_of[d] = mine + [n for n in g.nodes if n not in mine]
    return fetch_of, fetch_order, feeds_of, targets_of


def _safe(s):
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", s)


def frame_ids_of(graph):
    _, parent = graph.frames()
    return {f: k for k, f in enumerate(sorted(parent, key=lambda f: (f != ROOT_FRAME, f)))}


def partition(graph, where, frame_ids=None):
    """Split `graph` (every node placed by `where`) into one graph per device with Send/Recv.

    frame_ids: the frame numbering of the graph the session runs (defaults to this graph's), so a
    partitioned run gives ops that read their frame tag (random numbers) the values of a 1-device run.
    """
    frame_ids = frame_ids or frame_ids_of(graph)
    types = graph.infer_types()
    nodes = {}
    for n in graph.nodes.values():
        nodes[n.name] = Node(n.name, n.op, list(n.inputs), dict(n.attrs), where[n.name], n.loc)
    b = _Builder(graph.signature.get("name"), nodes, types)
    b.colocate_next_iterations()
    b.replicate_enters()
    frame_of, parent = b.g.frames()
    b.add_control_loops(frame_of, parent)
    frame_of, parent = b.g.frames()
    b.add_send_recv(frame_of, parent)
    if ALAP_RECVS:
        from dfc.runtime.recv_schedule import delay_recvs
        delay_recvs(b.g)
    graphs = {}
    for n in b.nodes.values():
        n = Node(n.name, n.op, _data_then_control(n.inputs), n.attrs, n.device, n.loc)
        graphs.setdefault(n.device, Graph(f"{graph.signature.get('name')}@{n.device}")).add_node(n)
    return Partitioned(graphs, {n.name: n.device for n in b.nodes.values()}, frame_ids)


class _Builder:
    """The whole graph being rewritten (copies of the nodes), and the types of their outputs."""

    def __init__(self, name, nodes, types):
        self.g = Graph(name)
        for n in nodes.values():
            self.g.add_node(n)
        self.nodes, self.types = self.g.nodes, types

    def _consumers(self):
        out = {name: [] for name in self.nodes}
        for n in self.nodes.values():
            for k, ref in enumerate(n.inputs):
                src = parse_input(ref)[0]
                if src in out:
                    out[src].append((n, k))
        return out

    def _new(self, name, op, inputs, attrs, device, like=None):
        base, k = name, 1
        while name in self.nodes:
            name = f"{base}_{k}"
            k += 1
        n = self.g.add_node(Node(name, op, inputs, attrs, device, like.loc if like is not None else None))
        if like is not None and like.name in self.types:
            self.types[name] = self.types[like.name]
        return n

    def _rewire(self, consumer, k, new_src):
        _, port, ctrl = parse_input(consumer.inputs[k])
        self.g.set_input(consumer.name, k, f"^{new_src}" if ctrl else f"{new_src}:{port}")

    def colocate_next_iterations(self):
        """A NextIteration runs on its Merge's device: the value crosses inside the iteration."""
        cons = self._consumers()
        for n in list(self.nodes.values()):
            if n.op != "NextIteration":
                continue
            devs = _consumer_devices(cons[n.name])
            if not devs or n.device in devs:
                others = [d for d in devs if d != n.device]
            else:
                n.device, others = devs[0], devs[1:]
            for d in others:
                rep = self._new(f"{n.name}/{_safe(d)}", n.op, list(n.inputs), dict(n.attrs), d, n)
                for c, k in cons[n.name]:
                    if c.device == d:
                        self._rewire(c, k, rep.name)

    def replicate_enters(self):
        """An Enter is copied onto each device that consumes it: its input crosses in the parent frame."""
        cons = self._consumers()
        for n in list(self.nodes.values()):
            if n.op != "Enter":
                continue
            devs = _consumer_devices(cons[n.name])
            if devs and n.device not in devs:
                n.device = devs[0]
            for d in devs:
                if d == n.device:
                    continue
                rep = self._new(f"{n.name}/{_safe(d)}", n.op, list(n.inputs), dict(n.attrs), d, n)
                for c, k in cons[n.name]:
                    if c.device == d:
                        self._rewire(c, k, rep.name)

    def add_control_loops(self, frame_of, parent):
        loop_cond, par_iters = {}, {}
        for n in self.nodes.values():
            f = frame_of[n.name]
            if n.op == "LoopCond":
                if f in loop_cond:
                    raise DfcGraphError(f"frame {f!r} has two LoopConds", node=n.name)
                loop_cond[f] = n.name
            if n.op == "Enter":
                fr = n.attrs["frame_name"]
                par_iters[fr] = min(par_iters.get(fr, 1 << 30), n.attrs.get("parallel_iterations", 32))
        needed = set()
        for n in list(self.nodes.values()):
            f = frame_of[n.name]
            while f != ROOT_FRAME:
                needed.add((f, n.device))
                f = parent[f]
        depth = {}

        def depth_of(f):
            if f not in depth:
                depth[f] = 0 if f == ROOT_FRAME else depth_of(parent[f]) + 1
            return depth[f]
        self.merge_of = {}
        for f, d in sorted(needed, key=lambda fd: (depth_of(fd[0]), fd)):
            if f not in loop_cond:
                raise DfcGraphError(f"loop frame {f!r} has no LoopCond; it cannot be split across devices")
            pre = f"_cl/{_safe(f)}/{_safe(d)}"
            if parent[f] == ROOT_FRAME:
                src = self.nodes.get(f"_cl/src/{_safe(d)}")
                if src is None:
                    src = self._new(f"_cl/src/{_safe(d)}", "Const", [], {"value": np.array(True)}, d)
                src_ref = f"{src.name}:0"
            else:
                src_ref = f"{self.merge_of[(parent[f], d)]}:0"
            state = LoopBuilder(self.g, self._control_loop_maker(pre, d), f, par_iters.get(f, 32), ref=str)
            state.enter(src_ref, _BOOL)
            pivot, = state.iterate(f"{loop_cond[f]}:0")
            state.close([pivot])
            self.merge_of[(f, d)] = parse_input(state.merges[0])[0]

    def _control_loop_maker(self, pre, d):
        """LoopBuilder's `make` for a control-loop state machine on device d (nodes PRE/enter,
        PRE/merge, PRE/switch, PRE/pivot, PRE/next; values are "node:port" refs)."""
        def make(op, inputs, attrs, role, ttype):
            n = self._new(f"{pre}/{'pivot' if role == 'body' else role}", op, list(inputs), attrs, d)
            if ttype is not None:
                self.types[n.name] = [ttype, _INT]
            return [f"{n.name}:{p}" for p in range(opreg.get(op).num_outputs(attrs, len(inputs)))]
        return make

    def add_send_recv(self, frame_of, parent):
        recvs = {}
        for n in list(self.nodes.values()):
            for k, ref in enumerate(n.inputs):
                src, port, ctrl = parse_input(ref)
                s = self.nodes[src]
                if s.device == n.device:
                    continue
                key = (src, -1 if ctrl else port, n.device)
                r = recvs.get(key)
                if r is None:
                    r = recvs[key] = self._transfer(s, port, ctrl, n.device, frame_of, parent)
                self.g.set_input(n.name, k, f"^{r}" if ctrl else f"{r}:0")

    def _transfer(self, s, port, ctrl, dst, frame_of, parent):
        f = frame_of[s.name]
        if s.op == "Exit":
            f = parent[f]
        if ctrl:
            tname, dtype, shape, ins = f"^{s.name}", "bool", [], [f"^{s.name}"]
        else:
            t = self.types[s.name][port] if s.name in self.types else None
            tname, ins = f"{s.name}:{port}", [f"{s.name}:{port}"]
            dtype = t.dtype if t is not None else "float32"
            shape = None if t is None or t.shape is None else list(t.shape)
        attrs = {"tensor_name": tname, "send_device": s.device, "recv_device": dst, "dtype": dtype,
                 "shape": shape}
        tag = f"{_safe(s.name)}{'' if ctrl else '_' + str(port)}{'_ctrl' if ctrl else ''}_{_safe(dst)}"
        self._new(f"_send/{tag}", "Send", ins, dict(attrs), s.device)
        trigger = [] if f == ROOT_FRAME else [f"^{self.merge_of[(f, dst)]}"]
        return self._new(f"_recv/{tag}", "Recv", trigger, dict(attrs), dst).name


class _T:
    __slots__ = ("dtype", "shape")

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, shape


_BOOL, _INT = _T("bool", ()), _T("int32", ())


def prune(graph, fetch_nodes, targets, feed_names):
    """The subgraph the fetches and targets need; fed nodes lose their inputs."""
    needed = graph.needed(list(fetch_nodes) + list(targets), set(feed_names))
    g = Graph(graph.signature.get("name"))
    g.signature = graph.signature
    for n in graph.nodes.values():
        if n.name in needed:
            inputs = [] if n.name in feed_names else list(n.inputs)
            g.add_node(Node(n.name, n.op, inputs, dict(n.attrs), n.device, n.loc))
    return g


def _data_then_control(inputs):
    """Data inputs, then each control input once."""
    return [r for r in inputs if not r.startswith("^")] + \
        list(dict.fromkeys(r for r in inputs if r.startswith("^")))


def _consumer_devices(consumers):
    """The distinct devices of a node's consumers, in first-seen order."""
    return list(dict.fromkeys(c.device for c, _ in consumers))
