"""Graph and Node: the data model shared by the compiler and the runtime.

A node's inputs are tensor references "node:port" (":0" may be omitted) and
control inputs "^node". Node names are unique; the graph keeps nodes in
creation order, which is also the order of the JSON file.
"""
from dfc.errors import DfcGraphError, DfcInputError, DfcTypeError
from dfc.ir import ops as opreg
from dfc.ir.dtypes import TType
from dfc.traceback_filter import api_boundary

ROOT_FRAME = ""


def parse_input(ref):
    """'a:1' -> ('a', 1, False); 'a' -> ('a', 0, False); '^a' -> ('a', -1, True)."""
    if ref.startswith("^"):
        return ref[1:], -1, True
    name, sep, port = ref.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):    # int() would also take "-1", " 1", "1_0"
        return ref, 0, False
    try:
        return name, int(port), False
    except ValueError:     # more digits than int() converts
        return ref, 0, False


class Node:
    """One operation. `loc` is the user's "file.py:line" that built it and `var` the user's
    variable (or parameter) its value was assigned to, when known: debugging information for
    messages, `dfc show` and `dfc viz`; neither changes what the node computes."""
    __slots__ = ("name", "op", "inputs", "attrs", "device", "loc", "var")

    def __init__(self, name, op, inputs=(), attrs=None, device=None, loc=None, var=None):
        self.name, self.op, self.inputs = name, op, list(inputs)
        self.attrs = dict(attrs or {})
        self.device, self.loc, self.var = device, loc, var

    @property
    def data_inputs(self):
        return [i for i in self.inputs if not i.startswith("^")]

    @property
    def control_inputs(self):
        return [i[1:] for i in self.inputs if i.startswith("^")]

    def __repr__(self):
        return f"Node({self.name}={self.op}({', '.join(self.inputs)}))"


class Graph:
    """A dataflow graph with a signature (its named inputs and output structure).

    signature = {"name": str, "inputs": [{"name", "node", "dtype", "shape"}],
                 "outputs": structure of {"ref": "node:port"} leaves,
                 "targets": [node names that run on every call]}
    """

    def __init__(self, name="graph"):
        self.nodes = {}
        self.signature = {"name": name, "inputs": [], "outputs": None, "targets": []}
        self._types = None
        self.from_file = False     # loaded from JSON: not trusted to choose checkpoint paths

    # ------------------------------------------------------------ building
    def add_node(self, node):
        if node.name in self.nodes:
            raise DfcGraphError(f"duplicate node name {node.name!r}", node=node.name)
        self.nodes[node.name] = node
        self._types = None
        return node

    def remove_nodes_after(self, count):
        """Drop every node created after the first `count` (rollback of a retrace)."""
        for name in list(self.nodes)[count:]:
            del self.nodes[name]
        self._types = None

    def set_input(self, node_name, index, ref):
        """Rewire input `index` of node `node_name` to `ref` (a loop's back edge, an edge moved
        onto a Recv); cached types are recomputed on the next infer_types()."""
        self.node(node_name).inputs[index] = ref
        self._types = None

    def add_control_input(self, node_name, src):
        """Make node `node_name` also wait for node `src` (a control input '^src')."""
        self.node(node_name).inputs.append("^" + src)
        self._types = None

    def node(self, name):
        try:
            return self.nodes[name]
        except KeyError:
            raise DfcGraphError(f"no node named {name!r}") from None

    def num_nodes(self):
        return len(self.nodes)

    def count_ops(self):
        out = {}
        for n in self.nodes.values():
            out[n.op] = out.get(n.op, 0) + 1
        return out

    def summary(self):
        counts = self.count_ops()
        loop_preds = {n.inputs[1] for n in self.nodes.values() if n.op == "Switch"
                      and self.nodes[parse_input(n.inputs[1])[0]].op == "LoopCond"}
        conds = len({n.inputs[1] for n in self.nodes.values() if n.op == "Switch" and n.inputs[1] not in loop_preds})
        loops = len({n.attrs["frame_name"] for n in self.nodes.values() if n.op == "Enter"})
        return {"nodes": len(self.nodes), "conds": conds, "loops": loops,
                "switches": counts.get("Switch", 0), "merges": counts.get("Merge", 0)}

    # ------------------------------------------------------------ analysis
    def consumers(self):
        """name -> list of (consumer name, input index or -1 for control)."""
        out = {name: [] for name in self.nodes}
        for n in self.nodes.values():
            for k, ref in enumerate(n.inputs):
                src, port, ctrl = parse_input(ref)
                if src in out:
                    out[src].append((n.name, -1 if ctrl else k))
        return out

    def needed(self, wanted, feeds=()):
        """The names of the nodes that running `wanted` needs: those and their inputs, transitively,
        stopping at fed nodes (a fed node's own inputs are not needed)."""
        needed, stack = set(), list(wanted)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            if name not in self.nodes:
                raise DfcInputError(f"no node named {name!r}")
            needed.add(name)
            if name not in feeds:
                stack.extend(parse_input(r)[0] for r in self.nodes[name].inputs)
        return needed

    def topo_order(self):
        """Nodes in an order where every input comes first, ignoring NextIteration back edges.

        A cycle that does not pass through NextIteration is a DfcGraphError.
        """
        indeg, users = {}, {name: [] for name in self.nodes}
        for n in self.nodes.values():
            cnt = 0
            for ref in n.inputs:
                src, _, _ = parse_input(ref)
                if src not in self.nodes:
                    raise DfcGraphError(f"input {ref!r} names no node", node=n.name)
                if self.nodes[src].op == "NextIteration":
                    continue
                users[src].append(n.name)
                cnt += 1
            indeg[n.name] = cnt
        order = [name for name, d in indeg.items() if d == 0]
        i = 0
        while i < len(order):
            for u in users[order[i]]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    order.append(u)
            i += 1
        if len(order) != len(self.nodes):
            stuck = sorted(name for name, d in indeg.items() if d > 0)
            raise DfcGraphError(f"cycle that does not pass through NextIteration among {stuck[:8]}",
                                node=stuck[0])
        return [self.nodes[name] for name in order]

    def frames(self):
        """(node name -> frame name, frame name -> parent frame name). The root frame is ''."""
        frame_of, parent = {}, {ROOT_FRAME: None}
        for n in self.topo_order():
            srcs = [parse_input(r)[0] for r in n.inputs]
            srcs = [s for s in srcs if self.nodes[s].op != "NextIteration" or s in frame_of]
            in_frames = {self._out_frame(s, frame_of, parent) for s in srcs}
            if len(in_frames) > 1:
                raise DfcGraphError(f"inputs come from different frames {sorted(in_frames)}", node=n.name)
            f = in_frames.pop() if in_frames else ROOT_FRAME
            if n.op == "Enter":
                child = n.attrs.get("frame_name")
                if not isinstance(child, str) or not child:
                    raise DfcGraphError("Enter needs a frame_name", node=n.name)
                if parent.setdefault(child, f) != f:
                    raise DfcGraphError(f"frame {child!r} is entered from two frames", node=n.name)
                f = child
            frame_of[n.name] = f
        for n in self.nodes.values():
            if n.op == "NextIteration":
                for ref in n.inputs:
                    if self._out_frame(parse_input(ref)[0], frame_of, parent) != frame_of[n.name]:
                        raise DfcGraphError("NextIteration input from another frame", node=n.name)
        return frame_of, parent

    def _out_frame(self, src, frame_of, parent):
        """The frame in which node `src`'s outputs live."""
        f = frame_of[src]
        if self.nodes[src].op == "Exit":
            if parent.get(f) is None:
                raise DfcGraphError("Exit outside any loop frame", node=src)
            return parent[f]
        return f

    def infer_types(self):
        """name -> list of output TTypes, checking every node's dtype/shape rule."""
        if self._types is not None:
            return self._types
        # A loop Merge is first typed from its Enter alone (its NextIteration comes later in
        # topological order); a loop variable whose shape changes is typed again with the join.
        try:
            types = self._infer_pass({})
        except DfcTypeError:       # maybe only because a loop variable grows: widen and retry
            types = self._infer_pass({}, widen=True)
        for _ in range(16):
            if self._merges_settled(types):
                break
            types = self._infer_pass(types)
        for n in self.nodes.values():
            if n.op == "Merge":
                dts = set()
                for ref in n.data_inputs:
                    src, port, _ = parse_input(ref)
                    dts.add(types[src][port].dtype)
                if len(dts) > 1:
                    raise DfcTypeError(f"Merge inputs have different dtypes {sorted(dts)}", node=n.name,
                                       loc=n.loc)
        self._types = types
        return types

    def _merges_settled(self, types):
        for n in self.nodes.values():
            if n.op == "Merge":
                ins = [types[src][port] for src, port, _ in map(parse_input, n.data_inputs)]
                try:
                    joined = opreg.get("Merge").infer(n.attrs, ins)[0]
                except DfcTypeError:
                    continue        # inputs of different dtypes: reported below, naming the node
                if joined != types[n.name][0]:
                    return False
        return True

    def _infer_pass(self, before, widen=False):
        """One pass in topological order; back edges (NextIteration -> Merge) take their type
        from the previous pass (`before`), or are skipped in the first (`widen`: and the
        Merge's dimensions are unknown)."""
        types = {}
        for n in self.topo_order():
            opdef = opreg.get(n.op)
            ins = []
            skipped = False
            for ref in n.data_inputs:
                src, port, _ = parse_input(ref)
                if src not in types and src in before:
                    ins.append(before[src][port])
                    continue
                if src not in types:      # a back edge from a NextIteration not typed yet
                    skipped = True
                    continue
                if port >= len(types[src]):
                    raise DfcGraphError(f"input {ref!r}: {self.nodes[src].op} has {len(types[src])} outputs",
                                        node=n.name)
                ins.append(types[src][port])
            try:
                out = opdef.infer(n.attrs, ins)
            except (DfcTypeError, DfcGraphError) as e:
                raise type(e)(e.message, node=n.name, loc=n.loc) from None
            except Exception as e:   # noqa: BLE001 — a loaded graph's attrs can break a rule any way
                raise DfcGraphError(f"bad attrs or inputs for {n.op}: {type(e).__name__}: {e}", node=n.name,
                                    loc=n.loc) from None
            if skipped and widen and out[0].shape is not None:
                out = [TType(out[0].dtype, tuple(None for _ in out[0].shape))] + list(out[1:])
            types[n.name] = out
        return types

    def verify(self):
        """Check the graph is well formed; raise DfcGraphError naming the bad node.

        Linear in the size of the graph (consumers are computed once), so loading a file
        costs about as much as reading it.
        """
        from dfc.ir import checks       # checks uses this module
        for name, n in self.nodes.items():
            if not name or ":" in name or name.startswith("^"):
                raise DfcGraphError(f"bad node name {name!r}", node=name)
            opdef = opreg.get(n.op) if n.op in opreg.REGISTRY else None
            if opdef is None:
                raise DfcGraphError(f"unknown op {n.op!r}", node=name)
            seen_ctrl = False
            for ref in n.inputs:
                src, port, ctrl = parse_input(ref)
                if src not in self.nodes:
                    raise DfcGraphError(f"input {ref!r} names no node", node=name)
                if ctrl:
                    seen_ctrl = True
                elif seen_ctrl:
                    raise DfcGraphError("data inputs must come before control inputs", node=name)
                else:
                    checks.check_port(self.nodes[src], port, ref, name)
            try:
                opdef.check_arity(len(n.data_inputs))
            except DfcGraphError as e:
                raise DfcGraphError(e.message, node=name) from None
            if n.op == "Merge" and n.control_inputs:
                raise DfcGraphError("Merge takes no control inputs", node=name)
        frame_of, parent = self.frames()
        consumers = self.consumers()
        for n in self.nodes.values():
            if n.op == "Merge" and frame_of[n.name] != ROOT_FRAME:
                srcs = [self.nodes[parse_input(r)[0]].op for r in n.inputs]
                if "Enter" in srcs and "NextIteration" not in srcs:
                    raise DfcGraphError("loop Merge has no NextIteration input", node=n.name)
            if n.op == "NextIteration" and frame_of[n.name] == ROOT_FRAME:
                raise DfcGraphError("NextIteration outside any loop frame", node=n.name)
            if n.op == "NextIteration":
                users = [u for u, _ in consumers[n.name]]
                if not users or any(self.nodes[u].op != "Merge" for u in users):
                    raise DfcGraphError("NextIteration must feed a Merge", node=n.name)
            if frame_of[n.name] != ROOT_FRAME and not n.inputs:
                raise DfcGraphError("a node inside a loop frame needs an input (add a control input)",
                                    node=n.name)
        types = self.infer_types()
        checks.check_graph(self, frame_of, parent, consumers, types)
        return self

    # ------------------------------------------------------------ printing and running
    def text(self):
        from dfc.ir.printer import graph_text
        return graph_text(self)

    @api_boundary
    def __call__(self, *args, **kwargs):
        """Run the graph on its inputs: `dfc.run(graph, ...)` (the runtime; dfc.ir never imports it)."""
        import dfc
        return dfc.run(self, *args, **kwargs)

    def __repr__(self):
        return f"<dfc.Graph {self.signature.get('name')!r} with {len(self.nodes)} nodes>"
