"""Pictures of a graph: Graphviz dot (frames as clusters), Mermaid, or SVG via `dot`."""
import shutil
import subprocess

from dfc.errors import DfcError
from dfc.ir.graph import ROOT_FRAME, parse_input

_SHAPES = {"Switch": "diamond", "Merge": "invtriangle", "Enter": "house", "Exit": "invhouse",
           "NextIteration": "cds", "LoopCond": "octagon"}


def to_dot(g):
    frame_of, parent = g.frames()
    children = {}
    for f, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(f)
    members = {}
    for name, f in frame_of.items():
        members.setdefault(f, []).append(name)
    lines = ["digraph dfc {", "  rankdir=TB; node [fontsize=10];"]

    def emit(frame, indent):
        pad = "  " * indent
        for name in members.get(frame, []):
            n = g.nodes[name]
            shape = _SHAPES.get(n.op, "box")
            lines.append(f'{pad}"{name}" [label="{name}\\n{n.op}", shape={shape}];')
        for k, child in enumerate(sorted(children.get(frame, []))):
            lines.append(f'{pad}subgraph "cluster_{child}" {{ label="frame {child}"; style=rounded;')
            emit(child, indent + 1)
            lines.append(f"{pad}}}")

    emit(ROOT_FRAME, 1)
    for n in g.nodes.values():
        for ref in n.inputs:
            src, port, ctrl = parse_input(ref)
            style = ' [style=dashed]' if ctrl else (f' [label="{port}"]' if port else "")
            lines.append(f'  "{src}" -> "{n.name}"{style};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(g):
    frame_of, parent = g.frames()
    lines = ["flowchart TD"]
    by_frame = {}
    for name, f in frame_of.items():
        by_frame.setdefault(f, []).append(name)
    for f, names in by_frame.items():
        if f != ROOT_FRAME:
            lines.append(f"  subgraph {f}")
        for name in names:
            lines.append(f'    {name}["{name}: {g.nodes[name].op}"]')
        if f != ROOT_FRAME:
            lines.append("  end")
    for n in g.nodes.values():
        for ref in n.inputs:
            src, _, ctrl = parse_input(ref)
            lines.append(f"  {src} {'-.->' if ctrl else '-->'} {n.name}")
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
