"""`dfc viz -o g.svg` without Graphviz: valid SVG, loops and conds as nested clusters, the user's
variable names and lines on the nodes, nothing overlapping, the same file every time."""
import inspect
import os
import sys
import xml.etree.ElementTree as ET

import pytest

import dfc
from dfc.ir.viz import cluster_tree, to_dot, to_mermaid, write_picture
from tests import clitools

SVG = "{http://www.w3.org/2000/svg}"
HERE = os.path.basename(__file__)


@dfc.function(input_signature=[dfc.TensorSpec([], "int64")])
def collatz(n):
    steps = 0
    peak = n
    while n != 1:                       # LOOP
        if n % 2 == 0:                  # COND
            n = n // 2                  # HALVE
        else:
            n = 3 * n + 1               # TRIPLE
        peak = dfc.maximum(peak, n)     # PEAK
        steps += 1
    return steps, peak


def line(marker):
    lines, first = inspect.getsourcelines(collatz.python_function)
    return first + next(i for i, text in enumerate(lines) if f"# {marker}" in text)


@pytest.fixture(scope="module")
def svg(tmp_path_factory):
    """The graph file, and `dfc viz` of it to SVG run with no Graphviz on PATH."""
    d = tmp_path_factory.mktemp("viz")
    dfc.save(collatz.trace(), str(d / "collatz.json"))
    r = clitools.dfc("viz", d / "collatz.json", "-o", d / "collatz.svg", env={"PATH": str(d)})
    assert r.returncode == 0, r.stderr
    return d / "collatz.json", (d / "collatz.svg").read_text()


def boxes(root):
    """cluster key -> (kind, label, rect), node name -> (texts, cluster key, rect)."""
    clusters, nodes = {}, {}
    for g in root.iter(f"{SVG}g"):
        cls = g.get("class", "")
        rect = g.find(f"{SVG}rect")
        if cls.startswith("cluster "):
            box = tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))
            clusters[g.get("id")[len("cluster-"):]] = (cls.split()[1], g.find(f"{SVG}text").text, box)
        elif cls == "node":
            box = tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))
            texts = [t.text for t in g.findall(f"{SVG}text")]
            nodes[g.get("id")[len("node-"):]] = (texts, g.get("data-cluster"), box)
    return clusters, nodes


def inside(a, b):
    return b[0] <= a[0] and b[1] <= a[1] and a[0] + a[2] <= b[0] + b[2] and a[1] + a[3] <= b[1] + b[3]


def overlap(a, b):
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def test_svg_is_valid_xml_with_loop_cond_and_branch_clusters(svg):
    _, text = svg
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg"
    clusters, nodes = boxes(root)
    kinds = sorted(kind for kind, _, _ in clusters.values())
    assert kinds == ["branch", "branch", "cond", "loop"], kinds
    labels = {kind: label for kind, label, _ in clusters.values() if kind != "branch"}
    assert f"{HERE}:{line('LOOP')}" in labels["loop"] and "n, peak, steps" in labels["loop"]
    assert labels["cond"] == f"if  {HERE}:{line('COND')}"
    assert sorted(label for kind, label, _ in clusters.values() if kind == "branch") == ["false", "true"]


def test_nodes_show_the_users_variables_and_lines_in_the_right_cluster(svg):
    _, text = svg
    clusters, nodes = boxes(ET.fromstring(text))
    by_head = {texts[0]: (texts[1], key) for texts, key, _ in nodes.values()}
    branch = {label: key for key, (kind, label, _) in clusters.items() if kind == "branch"}
    loop = next(key for key, (kind, _, _) in clusters.items() if kind == "loop")
    tail, key = by_head["n = FloorDiv"]
    assert tail.endswith(f"{HERE}:{line('HALVE')}") and key == branch["true"]
    tail, key = by_head["n = Add"]
    assert tail.endswith(f"{HERE}:{line('TRIPLE')}") and key == branch["false"]
    tail, key = by_head["peak = Maximum"]
    assert tail.endswith(f"{HERE}:{line('PEAK')}") and key == loop
    assert by_head["n = Placeholder"][1] == ""                   # outside every cluster
    for head in ("steps = Merge", "peak = Merge", "n = Merge", "n = NextIteration", "steps = Exit"):
        assert head in by_head, sorted(by_head)


def test_nothing_overlaps_and_clusters_hold_their_nodes(svg):
    _, text = svg
    clusters, nodes = boxes(ET.fromstring(text))
    for name, (_, key, box) in nodes.items():
        if key:
            assert inside(box, clusters[key][2]), name
    items = [box for _, _, box in nodes.values()]
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            assert not overlap(a, b)
    tree = cluster_tree(dfc.load(str(svg[0])))
    for c in tree.walk():
        kids = [clusters[k.key][2] for k in c.children]
        for k in c.children:
            if c.kind != "root":
                assert inside(clusters[k.key][2], clusters[c.key][2])
        for i, a in enumerate(kids):
            for b in kids[i + 1:]:
                assert not overlap(a, b)
        for name in c.nodes:             # a cluster's own nodes are not under a child cluster
            assert not any(overlap(nodes[name][2], k) for k in kids), name


def test_svg_is_the_same_every_time(svg, tmp_path):
    path, text = svg
    r = clitools.dfc("viz", path, "-o", tmp_path / "again.svg")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "again.svg").read_text() == text


def test_dot_and_mermaid_have_the_cond_clusters_too(svg):
    g = dfc.load(str(svg[0]))
    dot = to_dot(g)
    assert 'subgraph "cluster_while"' in dot and 'subgraph "cluster_while/cond ' in dot
    assert f"n = FloorDiv\\n{HERE}:{line('HALVE')}" in dot
    mmd = to_mermaid(g)
    assert '["if"]' in mmd and '["true"]' in mmd and '["false"]' in mmd


def test_a_graph_without_control_flow(tmp_path):
    g = dfc.trace(lambda x: dfc.tanh(x) * 2.0, dfc.TensorSpec([3], "float32"))
    write_picture(g, str(tmp_path / "plain.svg"))
    clusters, nodes = boxes(ET.parse(tmp_path / "plain.svg").getroot())
    assert not clusters and len(nodes) == g.num_nodes()


def test_names_with_odd_characters_are_escaped(svg, tmp_path):
    from tests.cli.test_cli_errors import renamed     # every node and frame name made hostile
    g = renamed(svg[0], tmp_path / "nasty.json")
    write_picture(g, str(tmp_path / "nasty.svg"))
    clusters, nodes = boxes(ET.parse(tmp_path / "nasty.svg").getroot())
    assert len(nodes) == g.num_nodes() and len(clusters) == 4


def test_svg_without_grandalf_says_what_to_install(svg, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "grandalf", None)
    monkeypatch.setitem(sys.modules, "grandalf.graphs", None)
    with pytest.raises(dfc.DfcError, match=r"dfc\[viz\]"):
        write_picture(dfc.load(str(svg[0])), str(tmp_path / "x.svg"))
