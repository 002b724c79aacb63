"""Pictures of a graph: Graphviz dot, Mermaid, or SVG (dfc/ir/svg.py, no Graphviz needed).

Loop frames, conds and their true/false branches are clusters (cluster_tree);
a node's box shows its op, the user's variable and source line.

Node and frame names come from the graph file and may hold any character, so
every name is escaped: in dot, names are quoted IDs and labels; in Mermaid,
nodes get plain ids (n0, n1, ...) and names appear only in quoted labels with
unsafe characters written as entity codes.
"""
import os
import re

from dfc.errors import DfcError
from dfc.ir.graph import ROOT_FRAME, parse_input

_SHAPES = {"Switch": "diamond", "Merge": "invtriangle", "Enter": "house", "Exit": "invhouse",
           "NextIteration": "cds", "LoopCond": "octagon"}


def dot_quote(text):
    r"""`text` as a dot quoted string, shown literally in labels.

    A backslash is doubled (dot keeps \\ in an ID and draws it as \ in a
    label), a quote escaped, a newline written \n and other control characters
    \uXXXX. Since every original backslash is doubled, no two names give the
    same ID."""
    out = []
    for ch in str(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Cluster:
    """A box of the picture: a loop frame, a cond, or one branch of a cond.

    kind is "root", "loop", "cond" or "branch"; key is unique (a loop's is its
    frame name); name is short (the frame name, "if", "true"/"false") and label
    adds the source line and variables; nodes are its direct member node names
    (graph order); children its nested clusters (sorted by key)."""

    def __init__(self, kind, key, name, label, parent=None):
        self.kind, self.key, self.name, self.label, self.parent = kind, key, name, label, parent
        self.nodes, self.children = [], []

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


def _where(n):
    return os.path.basename(n.loc) if n.loc else ""


def cluster_tree(g):
    """The root Cluster: loop frames nested as in the graph, and inside them every cond (its
    Switches and output Merges) with a "true" and a "false" branch cluster holding the nodes
    that run only in that branch (found by following each Switch's outputs in its frame up to
    the Merges both branches reach). Loops entered inside a branch nest in that branch."""
    frame_of, parent_frame = g.frames()
    names = list(g.nodes)
    order = {name: i for i, name in enumerate(names)}
    consumers = {name: [] for name in names}
    for n in g.nodes.values():
        for ref in n.inputs:
            src, port, _ = parse_input(ref)
            consumers[src].append((n.name, port))
    exits = {}
    for n in g.nodes.values():
        if n.op == "Exit":
            exits.setdefault(frame_of[n.name], []).append(n.name)

    root = Cluster("root", "", "", "")
    loops = {ROOT_FRAME: root}
    for f in sorted(f for f in parent_frame if f != ROOT_FRAME):
        loops[f] = Cluster("loop", f, f, _loop_label(g, f, frame_of))
    home = {name: loops[frame_of[name]] for name in names}       # innermost cluster of a node
    frame_home = {f: loops[parent_frame[f]] for f in loops if f != ROOT_FRAME}

    def reach(starts, frame, stops):
        """Nodes of `frame` reached from `starts` (and frames entered on the way)."""
        seen, frames, todo = set(), set(), list(starts)
        while todo:
            name = todo.pop()
            if name in seen or name in stops:
                continue
            n = g.nodes[name]
            if n.op == "Enter" and frame_of[name] != frame:
                child = n.attrs.get("frame_name")
                if child not in frames:
                    frames.add(child)
                    for e in exits.get(child, []):
                        todo.extend(c for c, _ in consumers[e])
                continue
            if frame_of[name] != frame:
                continue
            seen.add(name)
            if n.op in ("NextIteration", "Exit"):
                continue
            todo.extend(c for c, _ in consumers[name])
        return seen, frames

    groups = {}
    for n in g.nodes.values():
        if n.op == "Switch" and len(n.inputs) > 1:
            pred = parse_input(n.inputs[1])[0]
            if g.nodes[pred].op != "LoopCond":
                groups.setdefault((frame_of[n.name], n.inputs[1]), []).append(n.name)
    conds = []
    for (frame, pred), switches in sorted(groups.items(), key=lambda kv: order[kv[1][0]]):
        sides = []
        for port in (1, 0):
            starts = [c for s in switches for c, p in consumers[s] if p == port]
            sides.append(starts)
        t_all, _ = reach(sides[0], frame, set(switches))
        f_all, _ = reach(sides[1], frame, set(switches))
        joins = {m for m in t_all & f_all if g.nodes[m].op == "Merge"}
        t, tf = reach(sides[0], frame, set(switches) | joins)
        f, ff = reach(sides[1], frame, set(switches) | joins)
        both = t & f
        conds.append((frame, switches, sorted(joins, key=order.get), (t - both, tf), (f - both, ff)))
    # bigger conds first, so each node ends in the smallest cluster that holds it
    conds.sort(key=lambda c: -(len(c[3][0]) + len(c[4][0]) + len(c[1])))
    for k, (frame, switches, joins, (t, tf), (f, ff)) in enumerate(conds):
        first = g.nodes[switches[0]]
        cond = Cluster("cond", f"{frame}/cond {first.name}", "if", f"if  {_where(first)}".rstrip())
        cond.parent = home[switches[0]]
        for member in switches + joins:
            home[member] = cond
        for side, (members, frames) in (("true", (t, tf)), ("false", (f, ff))):
            branch = Cluster("branch", f"{cond.key} {side}", side, side, cond)
            for m in members:
                home[m] = branch
            for fr in frames:
                frame_home[fr] = branch
            cond.children.append(branch)
        loops[f"<cond {k}>"] = cond
    for c in loops.values():
        if c.kind == "cond":
            c.parent.children.append(c)
    for f, c in loops.items():
        if c.kind == "loop":
            c.parent = frame_home[f]
            c.parent.children.append(c)
    for name in names:
        home[name].nodes.append(name)
    for c in root.walk():
        c.children.sort(key=lambda x: x.key)
    return root


def _loop_label(g, frame, frame_of):
    """'while  file.py:17  (n, peak, steps)': the loop's source line and variables."""
    merges = [n for n in g.nodes.values() if frame_of[n.name] == frame and n.op == "Merge"
              and any(g.nodes[parse_input(r)[0]].op == "Enter" for r in n.data_inputs)]
    where = next((_where(n) for n in merges if n.loc), "")
    variables = [n.var for n in merges if n.var]
    text = f"loop {frame}  {where}".rstrip()
    if variables:
        text += f"  ({', '.join(dict.fromkeys(variables))})"
    return text


def node_label(n):
    """(first line, second line) of a node's box: `var = Op` and `name  file.py:12`."""
    head = f"{n.var} = {n.op}" if getattr(n, "var", None) else n.op
    tail = f"{n.name}  {_where(n)}".rstrip()
    return head, tail


def to_dot(g):
    """Graphviz dot: loops, conds and their branches as nested clusters; each node labelled with
    its op, the user's variable and source line."""
    root = cluster_tree(g)
    lines = ["digraph dfc {", "  rankdir=TB; node [fontsize=10];"]

    def emit(cluster, indent):
        pad = "  " * indent
        for name in cluster.nodes:
            n = g.nodes[name]
            shape = _SHAPES.get(n.op, "box")
            parts = [name, node_label(n)[0]] + ([_where(n)] if n.loc else [])
            label = '"' + "\\n".join(dot_quote(p)[1:-1] for p in parts) + '"'
            lines.append(f"{pad}{dot_quote(name)} [label={label}, shape={shape}];")
        for child in cluster.children:
            lines.append(f"{pad}subgraph {dot_quote('cluster_' + child.key)} {{ "
                         f"label={dot_quote(child.label)}; style=rounded;")
            emit(child, indent + 1)
            lines.append(f"{pad}}}")

    emit(root, 1)
    for n in g.nodes.values():
        for ref in n.inputs:
            src, port, ctrl = parse_input(ref)
            style = " [style=dashed]" if ctrl else (f" [label={dot_quote(port)}]" if port else "")
            lines.append(f"  {dot_quote(src)} -> {dot_quote(n.name)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# Characters Mermaid shows as they are inside a quoted label; the rest become "#code;".
_MERMAID_SAFE = re.compile(r"[A-Za-z0-9 _.,:/+*=%^~!?@$\-]")


def mermaid_label(text):
    """`text` as a quoted Mermaid label; unsafe characters as entity codes (#34; for a quote)."""
    return '"' + "".join(ch if _MERMAID_SAFE.fullmatch(ch) else f"#{ord(ch)};" for ch in str(text)) + '"'


def to_mermaid(g):
    """Mermaid flowchart: loops, conds and branches as nested subgraphs."""
    root = cluster_tree(g)
    ids = {name: f"n{k}" for k, name in enumerate(g.nodes)}     # Mermaid ids must be plain words
    cluster_ids = {c.key: f"f{k}" for k, c in enumerate(c for c in root.walk() if c is not root)}
    lines = ["flowchart TD"]

    def emit(cluster, indent):
        pad = "  " * indent
        for name in cluster.nodes:
            lines.append(f"{pad}{ids[name]}[{mermaid_label(name + ': ' + g.nodes[name].op)}]")
        for child in cluster.children:
            lines.append(f"{pad}subgraph {cluster_ids[child.key]} [{mermaid_label(child.name)}]")
            emit(child, indent + 1)
            lines.append(f"{pad}end")

    emit(root, 1)
    for n in g.nodes.values():
        for ref in n.inputs:
            src, _, ctrl = parse_input(ref)
            lines.append(f"  {ids[src]} {'-.->' if ctrl else '-->'} {ids[n.name]}")
    return "\n".join(lines) + "\n"


def write_picture(g, out):
    """Write a picture of g to `out`: .dot (Graphviz), .mmd (Mermaid) or .svg (laid out in
    Python with grandalf, no Graphviz needed)."""
    if out.endswith(".dot"):
        text = to_dot(g)
    elif out.endswith(".mmd"):
        text = to_mermaid(g)
    elif out.endswith(".svg"):
        from dfc.ir.svg import to_svg
        text = to_svg(g)
    else:
        raise DfcError(f"unknown picture format for {out!r} (use .dot, .mmd or .svg)")
    try:
        with open(out, "w") as f:
            f.write(text)
    except OSError as e:
        raise DfcError(f"cannot write {out}: {e}") from None
