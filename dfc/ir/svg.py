"""SVG pictures of a graph, laid out in Python (grandalf's Sugiyama layout): no Graphviz needed.

The clusters of viz.cluster_tree (loop frames, conds, their true/false
branches) are laid out inside out: each cluster's direct nodes and its child
clusters (as boxes of their own size) are placed in layers by grandalf, so
clusters never overlap. A loop's back edges (NextIteration -> Merge) are
reversed for the layering and drawn as blue arcs on the right. Each node's box
shows `var = Op` and `name  file.py:line`; its tooltip (<title>) the full
description. The output depends only on the graph, so the same graph gives the
same file.

    <svg>  <g class="cluster loop" id="cluster-KEY"> <title/> <rect/> <text/> nested clusters </g>
           <g class="edges"> <path class="edge ..."/> ... </g>
           <g class="nodes"> <g class="node" id="node-NAME" data-cluster="KEY"> ... </g> ... </g>
"""
import html

from dfc.errors import DfcError
from dfc.ir.graph import parse_input
from dfc.ir.viz import cluster_tree, node_label

CHAR_W, LINE_H, PAD = 6.6, 14, 6         # monospace 11px text: width per character, line height
CLUSTER_PAD, LABEL_H = 12, 18
X_SPACE, Y_SPACE = 18, 28
BACK_ROOM = 44                           # room right of a loop's nodes for its back-edge arcs
_CONTROL = {"Enter", "Exit", "NextIteration", "Merge", "Switch", "LoopCond"}
_STATE = {"VarHandle", "ReadVariable", "Assign", "AssignAdd", "AssignSub", "ResourceScatterAdd", "ResourceScatterSub"}
_CLUSTER_STYLE = {"loop": ("#3b6fb6", "#eaf1fb"), "cond": ("#c07a12", "#fdf3e3"),
                  "branch": ("#6b8e23", "#f3f8ea")}


def _grandalf():
    try:
        from grandalf.graphs import Edge, Vertex, graph_core
        from grandalf.layouts import SugiyamaLayout
    except ImportError:
        raise DfcError("writing .svg needs the Python package grandalf (pip install 'dfc[viz]'); "
                       "or write .dot (Graphviz) or .mmd (Mermaid) instead") from None
    return Vertex, Edge, graph_core, SugiyamaLayout


class _View:
    """What grandalf reads (w, h) and writes (xy) for a vertex."""

    def __init__(self, w, h):
        self.w, self.h, self.xy = w, h, None


class _EdgeView:
    def __init__(self):
        self.points = None

    def setpath(self, points):
        self.points = points


def _node_size(n):
    head, tail = node_label(n)
    return max(len(head), len(tail)) * CHAR_W + 2 * PAD, 2 * LINE_H + PAD


def _components(graph_core, items, vertices, edges, gedges):
    """grandalf graphs of the connected components, vertices and edges in our order (grandalf's
    own Graph() collects edges in a set, whose order changes from run to run)."""
    comp = {item: k for k, item in enumerate(items)}

    def find(k):
        while comp[items[k]] != k:
            k = comp[items[k]]
        return k
    for a, b in edges:
        ra, rb = find(comp[a]), find(comp[b])
        if ra != rb:
            comp[items[max(ra, rb)]] = min(ra, rb)
    groups = {}
    for item in items:
        groups.setdefault(find(comp[item]), []).append(item)
    out = []
    for members in groups.values():
        inside = set(members)
        out.append(graph_core([vertices[i] for i in members],
                              [gedges[e] for e in edges if e[0] in inside]))
    return out


def _feedback(items, edges, preferred):
    """Edges to reverse so the item graph has no cycle: `preferred` (loop back edges) first,
    then whatever a depth-first search in item order still finds going back."""
    out = {k: [] for k in items}
    for a, b in edges:
        if (a, b) not in preferred:
            out[a].append(b)
    back, state = set(preferred), {}
    for start in items:
        if start in state:
            continue
        stack = [(start, iter(out[start]))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(out[nxt])))
    return back


class _Layout:
    def __init__(self, g):
        self.g = g
        self.root = cluster_tree(g)
        self.size = {}      # item -> (w, h); items: ("n", node name) or ("c", cluster key)
        self.rel = {}       # item -> (x, y) of its top-left corner in its parent cluster
        self.routes = {}    # (parent cluster key, item a, item b) -> points relative to the parent
        self.owner = {}     # node name -> the cluster holding it directly
        self.back = set()   # (src, dst) node pairs drawn as loop back edges
        for c in self.root.walk():
            for name in c.nodes:
                self.owner[name] = c
        for n in g.nodes.values():
            if n.op == "Merge":
                for ref in n.data_inputs:
                    src = parse_input(ref)[0]
                    if g.nodes[src].op == "NextIteration":
                        self.back.add((src, n.name))
        self._place(self.root)

    def _item_of(self, cluster, name):
        """The direct item of `cluster` that holds node `name`, or None if it is outside."""
        c = self.owner[name]
        if c is cluster:
            return ("n", name)
        while c.parent is not None and c.parent is not cluster:
            c = c.parent
        return ("c", c.key) if c.parent is cluster else None

    def _place(self, cluster):
        Vertex, Edge, Graph, SugiyamaLayout = _grandalf()
        for child in cluster.children:
            self._place(child)
        items = [("n", name) for name in cluster.nodes] + [("c", c.key) for c in cluster.children]
        for name in cluster.nodes:
            self.size[("n", name)] = _node_size(self.g.nodes[name])
        members = set()
        for c in cluster.walk():
            members.update(c.nodes)
        edges, preferred = [], set()
        for dst in members:
            for ref in self.g.nodes[dst].inputs:
                src = parse_input(ref)[0]
                if src not in members:
                    continue
                a, b = self._item_of(cluster, src), self._item_of(cluster, dst)
                if a == b or (a, b) in edges:
                    continue
                edges.append((a, b))
                if (src, dst) in self.back:
                    preferred.add((a, b))
        edges.sort()
        back = _feedback(items, edges, preferred)
        vertices = {}
        for item in items:
            v = Vertex(item)
            v.view = _View(*self.size[item])
            vertices[item] = v
        gedges, inverted = {}, []
        for a, b in edges:
            e = Edge(vertices[a], vertices[b])
            e.view = _EdgeView()
            gedges[(a, b)] = e
            if (a, b) in back:
                inverted.append(e)
        x0 = 0.0
        for comp in _components(Graph, items, vertices, edges, gedges):
            sug = SugiyamaLayout(comp)
            sug.xspace, sug.yspace = X_SPACE, Y_SPACE
            comp_inverted = [e for e in inverted if e in comp.sE]
            roots = [v for v in comp.sV if not any(e.v[1] is v and e not in comp_inverted
                                                    for e in v.e)]
            sug.init_all(roots=roots or None, inverted_edges=comp_inverted, optimize=True)
            sug.draw()
            xs = [v.view.xy[0] - v.view.w / 2 for v in comp.sV]
            shift = x0 - min(xs)
            for v in comp.sV:
                v.view.xy = (v.view.xy[0] + shift, v.view.xy[1])
            for e in comp.sE:
                if e.view.points:
                    e.view.points = [(x + shift, y) for x, y in e.view.points]
            x0 = max(v.view.xy[0] + v.view.w / 2 for v in comp.sV) + X_SPACE * 2
        top = LABEL_H + CLUSTER_PAD if cluster.kind != "root" else CLUSTER_PAD
        left = BACK_ROOM if cluster.kind in ("loop", "root") else CLUSTER_PAD   # back-edge arcs
        if vertices:
            min_y = min(v.view.xy[1] - v.view.h / 2 for v in vertices.values())
        else:
            min_y = 0.0
        width = height = 0.0
        for item, v in vertices.items():
            x = v.view.xy[0] - v.view.w / 2 + left
            y = v.view.xy[1] - v.view.h / 2 - min_y + top
            self.rel[item] = (x, y)
            width, height = max(width, x + v.view.w), max(height, y + v.view.h)
        for (a, b), e in gedges.items():
            if e.view.points and len(e.view.points) > 2:
                self.routes[(cluster.key, a, b)] = [(x + left, y - min_y + top)
                                                     for x, y in e.view.points]
        label_w = len(cluster.label) * CHAR_W + 2 * CLUSTER_PAD
        right = BACK_ROOM if cluster.kind in ("loop", "root") else CLUSTER_PAD   # back-edge arcs
        self.size[("c", cluster.key)] = (max(width + right, label_w, 60.0),
                                         max(height + CLUSTER_PAD, top + CLUSTER_PAD))

    def absolute(self):
        """(node name -> (x, y, w, h), cluster key -> (x, y, w, h)) in picture coordinates."""
        nodes, clusters = {}, {}

        def walk(cluster, x, y):
            w, h = self.size[("c", cluster.key)]
            clusters[cluster.key] = (x, y, w, h)
            for name in cluster.nodes:
                rx, ry = self.rel[("n", name)]
                nodes[name] = (x + rx, y + ry) + self.size[("n", name)]
            for child in cluster.children:
                rx, ry = self.rel[("c", child.key)]
                walk(child, x + rx, y + ry)
        walk(self.root, 0.0, 0.0)
        self.clusters_abs = clusters
        return nodes, clusters


def _text(s):
    """s as XML character data: control characters (not allowed in XML) written as \\xNN."""
    s = "".join(ch if ord(ch) >= 32 and ord(ch) != 127 else f"\\x{ord(ch):02x}" for ch in str(s))
    return html.escape(s, quote=True)


def _fill(op):
    if op == "Placeholder":
        return "#dff3df"
    if op == "Const":
        return "#f2f2f2"
    if op in _CONTROL:
        return "#ffe9b3"
    if op in _STATE:
        return "#eadcf5"
    return "#ffffff"


def _cluster_colors(cluster):
    if cluster.kind == "branch" and cluster.name == "false":
        return "#b04a4a", "#fbeeee"
    return _CLUSTER_STYLE[cluster.kind]


def to_svg(g):
    """An SVG picture of g (see the module docstring)."""
    layout = _Layout(g)
    nodes, clusters = layout.absolute()
    margin = 10.0
    W, H = layout.size[("c", "")]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 2 * margin:.0f}" '
           f'height="{H + 2 * margin:.0f}" viewBox="{-margin:.0f} {-margin:.0f} '
           f'{W + 2 * margin:.0f} {H + 2 * margin:.0f}" font-family="DejaVu Sans Mono, monospace">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
           'fill="#555"/></marker><marker id="arrow-back" viewBox="0 0 10 10" refX="10" refY="5" '
           'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path '
           'd="M0,0 L10,5 L0,10 z" fill="#3b6fb6"/></marker></defs>',
           f'<rect x="{-margin:.0f}" y="{-margin:.0f}" width="{W + 2 * margin:.0f}" '
           f'height="{H + 2 * margin:.0f}" fill="white"/>']

    def emit(cluster, depth):
        pad = "  " * depth
        if cluster.kind != "root":
            x, y, w, h = clusters[cluster.key]
            stroke, fill = _cluster_colors(cluster)
            out.append(f'{pad}<g class="cluster {cluster.kind}" id="cluster-{_text(cluster.key)}">')
            out.append(f'{pad}  <title>{_text(cluster.label)}</title>')
            out.append(f'{pad}  <rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                       f'rx="8" fill="{fill}" stroke="{stroke}" stroke-width="1.2"/>')
            out.append(f'{pad}  <text x="{x + CLUSTER_PAD:.1f}" y="{y + LABEL_H - 4:.1f}" '
                       f'font-size="11" font-weight="bold" fill="{stroke}">'
                       f'{_text(cluster.label)}</text>')
        for child in cluster.children:
            emit(child, depth + 1)
        if cluster.kind != "root":
            out.append(f"{pad}</g>")

    # clusters (backgrounds, nested), then the edges, then the nodes on top
    emit(layout.root, 0)
    out.append('<g class="edges" fill="none">')
    for n in g.nodes.values():
        for ref in n.inputs:
            src, port, ctrl = parse_input(ref)
            out.append("  " + _edge(layout, nodes, src, n.name, port, ctrl))
    out.append("</g>")
    out.append('<g class="nodes">')
    for name, n in g.nodes.items():
        x, y, w, h = nodes[name]
        head, tail = node_label(n)
        tip = f"{name} = {n.op}" + (f"  [{n.var}]" if getattr(n, "var", None) else "") + \
            (f"  {n.loc}" if n.loc else "")
        home = layout.owner[name]
        out.append(f'  <g class="node" id="node-{_text(name)}" data-cluster="{_text(home.key)}">')
        out.append(f'    <title>{_text(tip)}</title>')
        out.append(f'    <rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                   f'rx="4" fill="{_fill(n.op)}" stroke="#444" stroke-width="0.8"/>')
        out.append(f'    <text x="{x + PAD:.1f}" y="{y + LINE_H:.1f}" font-size="11" '
                   f'fill="#111">{_text(head)}</text>')
        out.append(f'    <text x="{x + PAD:.1f}" y="{y + 2 * LINE_H:.1f}" font-size="9" '
                   f'fill="#666">{_text(tail)}</text>')
        out.append('  </g>')
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _edge(layout, nodes, src, dst, port, ctrl):
    sx, sy, sw, sh = nodes[src]
    dx, dy, dw, dh = nodes[dst]
    title = f"<title>{_text(src)}:{port} -> {_text(dst)}</title>" if not ctrl else \
        f"<title>^{_text(src)} -> {_text(dst)}</title>"
    if (src, dst) in layout.back or sy >= dy + dh:       # an edge going up: an arc on the right
        cx, _, cw, _ = layout.clusters_abs[layout.owner[dst].key]
        if sx + sw / 2 + dx + dw / 2 < 2 * cx + cw:      # left of the cluster's middle: arc on the left
            x1, x2 = sx, dx
            bulge = min(x1, x2) - BACK_ROOM * 0.8
        else:
            x1, x2 = sx + sw, dx + dw
            bulge = max(x1, x2) + BACK_ROOM * 0.8
        y1, y2 = sy + sh / 2, dy + dh / 2
        color = "#3b6fb6" if (src, dst) in layout.back else "#999"
        return (f'<path class="edge back" d="M{x1:.1f},{y1:.1f} C{bulge:.1f},{y1:.1f} '
                f'{bulge:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" stroke="{color}" stroke-width="1.1" '
                f'marker-end="url(#arrow-back)">{title}</path>')
    points = [(sx + sw / 2, sy + sh)]
    route = _route(layout, src, dst)
    if route:
        points += route
    points.append((dx + dw / 2, dy))
    d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in points)
    style = 'stroke="#999" stroke-dasharray="4,3"' if ctrl else 'stroke="#555"'
    extra = ""
    if not ctrl and layout.g.nodes[src].op == "Switch":
        color = "#6b8e23" if port == 1 else "#b04a4a"
        style = f'stroke="{color}"'
    elif not ctrl and port:
        extra = f' data-port="{port}"'
    return f'<path class="edge{" control" if ctrl else ""}" d="{d}" {style} stroke-width="1"' \
           f'{extra} marker-end="url(#arrow)">{title}</path>'


def _route(layout, src, dst):
    """The inner points grandalf routed for an edge between two items of one cluster (a long
    edge bends around the layers it crosses), in picture coordinates; [] if none."""
    c = layout.owner[src]
    chain = []
    while c is not None:
        chain.append(c)
        c = c.parent
    for cluster in chain:
        a, b = layout._item_of(cluster, src), layout._item_of(cluster, dst)
        if a is None or b is None or a == b:
            continue
        pts = layout.routes.get((cluster.key, a, b))
        if not pts:
            return []
        ox, oy = layout.clusters_abs[cluster.key][:2]
        return [(x + ox, y + oy) for x, y in pts[1:-1]]
    return []
