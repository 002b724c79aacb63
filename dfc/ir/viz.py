"""Pictures of a graph: Graphviz dot (frames as clusters), Mermaid, or SVG via `dot`.

Node and frame names come from the graph file and may hold any character, so
every name is escaped: in dot, names are quoted IDs and labels; in Mermaid,
nodes get plain ids (n0, n1, ...) and names appear only in quoted labels with
unsafe characters written as entity codes.
"""
import re
import shutil
import subprocess

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


def _frame_tree(g):
    """(frame -> its child frames, sorted; frame -> its node names in graph order)."""
    frame_of, parent = g.frames()
    children, members = {}, {}
    for f, p in sorted(parent.items()):
        if p is not None:
            children.setdefault(p, []).append(f)
    for name, f in frame_of.items():
        members.setdefault(f, []).append(name)
    return children, members


def to_dot(g):
    children, members = _frame_tree(g)
    lines = ["digraph dfc {", "  rankdir=TB; node [fontsize=10];"]

    def emit(frame, indent):
        pad = "  " * indent
        for name in members.get(frame, []):
            n = g.nodes[name]
            shape = _SHAPES.get(n.op, "box")
            label = dot_quote(name)[:-1] + "\\n" + dot_quote(n.op)[1:]
            lines.append(f"{pad}{dot_quote(name)} [label={label}, shape={shape}];")
        for child in children.get(frame, []):
            lines.append(f"{pad}subgraph {dot_quote('cluster_' + child)} {{ "
                         f"label={dot_quote('frame ' + child)}; style=rounded;")
            emit(child, indent + 1)
            lines.append(f"{pad}}}")

    emit(ROOT_FRAME, 1)
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
    children, members = _frame_tree(g)
    ids = {name: f"n{k}" for k, name in enumerate(g.nodes)}     # Mermaid ids must be plain words
    frame_ids = {f: f"f{k}" for k, f in enumerate(sorted(f for fs in children.values() for f in fs))}
    lines = ["flowchart TD"]

    def emit(frame, indent):
        pad = "  " * indent
        for name in members.get(frame, []):
            lines.append(f"{pad}{ids[name]}[{mermaid_label(name + ': ' + g.nodes[name].op)}]")
        for child in children.get(frame, []):
            lines.append(f"{pad}subgraph {frame_ids[child]} [{mermaid_label(child)}]")
            emit(child, indent + 1)
            lines.append(f"{pad}end")

    emit(ROOT_FRAME, 1)
    for n in g.nodes.values():
        for ref in n.inputs:
            src, _, ctrl = parse_input(ref)
            lines.append(f"  {ids[src]} {'-.->' if ctrl else '-->'} {ids[n.name]}")
    return "\n".join(lines) + "\n"


def write_picture(g, out):
    if out.endswith(".dot"):
        text = to_dot(g)
    elif out.endswith(".mmd"):
        text = to_mermaid(g)
    elif out.endswith(".svg"):
        dot = shutil.which("dot")
        if dot is None:
            raise DfcError("writing .svg needs Graphviz's `dot` on PATH; write .dot or .mmd instead")
        res = subprocess.run([dot, "-Tsvg"], input=to_dot(g), capture_output=True, text=True, check=False)
        if res.returncode:
            raise DfcError(f"dot failed: {res.stderr.strip()}")
        text = res.stdout
    else:
        raise DfcError(f"unknown picture format for {out!r} (use .dot, .mmd or .svg)")
    try:
        with open(out, "w") as f:
            f.write(text)
    except OSError as e:
        raise DfcError(f"cannot write {out}: {e}") from None
