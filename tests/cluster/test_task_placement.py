"""Tasks on chosen nodes: placements by node id, label, custom resource and "spread", checked on a
two-node Ray cluster simulated on this machine (two raylets, ray.cluster_utils), and placement errors
that name what exists (checked against node lists, no Ray needed)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import dfc
from dfc.runtime.cluster import placement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = ["ps:0", "worker:0", "worker:1"]


def node(node_id, ip="10.0.0.1", labels=None, resources=None, alive=True):
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Alive": alive, "Labels": labels or {},
            "Resources": dict(resources or {}, CPU=2.0)}


NODES = [node("aaaa1111" + "0" * 48, "10.0.0.1", {"zone": "a"}, {"gpu_box": 1}), node("bbbb2222" + "0" * 48, "10.0.0.2", {"zone": "b"}),
         node("cccc3333" + "0" * 48, "10.0.0.2", {"zone": "c"}), node("dddd4444" + "0" * 48, "10.0.0.9", {"zone": "d"}, alive=False)]


def test_a_task_entry_wins_over_its_job():
    got = placement.parse({"worker": "spread", "worker:1": "label:zone=b", "ps": {"label": {"zone": "a"}}}, TASKS)
    assert got == {"worker:0": ("spread", None), "worker:1": ("label", {"zone": "b"}), "ps:0": ("label", {"zone": "a"})}
    assert placement.parse("ps=resource:gpu_box; worker=node:aaaa", TASKS) == {
        "ps:0": ("resource", "gpu_box"), "worker:0": ("node", "aaaa"), "worker:1": ("node", "aaaa")}


@pytest.mark.parametrize("spec, words", [
    ({"chief": "spread"}, "neither a job nor a task"),
    ({"ps": "zone=b"}, "bad placement for ps:0"),
    ({"ps": "label:zone"}, "label:KEY=VALUE"),
    ({"ps": 3}, "bad placement for ps:0"),
])
def test_bad_placements_are_refused_before_anything_starts(spec, words):
    with pytest.raises(dfc.DfcError, match=words):
        placement.parse(spec, TASKS)


def test_node_ids_addresses_labels_and_resources_resolve_to_ray_options():
    opts = placement.ray_options("ps:0", ("node", "bbbb"), NODES)
    assert opts["scheduling_strategy"].node_id == "bbbb2222" + "0" * 48 and opts["scheduling_strategy"].soft is False
    assert placement.ray_options("ps:0", ("ip", "10.0.0.1"), NODES)["scheduling_strategy"].node_id == "aaaa1111" + "0" * 48
    assert placement.ray_options("ps:0", ("label", {"zone": "c"}), NODES) == {"label_selector": {"zone": "c"}}
    assert placement.ray_options("ps:0", ("resource", "gpu_box"), NODES) == {"resources": {"gpu_box": 0.001}}
    spread = [placement.ray_options(f"worker:{k}", ("spread", None), NODES)["scheduling_strategy"] for k in range(4)]
    assert [s.node_id[:4] for s in spread] == ["aaaa", "bbbb", "cccc", "aaaa"]     # live nodes, round robin


@pytest.mark.parametrize("where, words", [
    (("ip", "10.0.0.2"), "matches 2 live node.*node:ID or label"),      # two raylets on one machine
    (("ip", "10.0.0.9"), "matches no live node"),                       # its only node is dead
    (("node", "ffff"), "matches no live node.*aaaa11110000 at 10.0.0.1"),
    (("label", {"zone": "z"}), r"labels \{'zone': 'z'\}.*zone=a, zone=b, zone=c"),
    (("resource", "tpu"), "resource 'tpu'.*gpu_box"),
])
def test_a_placement_no_live_node_satisfies_names_what_exists(where, words):
    with pytest.raises(dfc.DfcError, match=words):
        placement.ray_options("ps:0", where, NODES)


SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["RAY_TQDM_PATCH_PRINT"] = "0"
    import numpy as np, ray, dfc
    from ray.cluster_utils import Cluster
    rc = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "labels": {"zone": "a"},
                                                        "include_dashboard": False})
    b = rc.add_node(num_cpus=1, labels={"zone": "b"}, resources={"machine_b": 1})
    head = next(n["NodeID"] for n in ray.nodes() if n["NodeID"] != b.node_id) if ray.is_initialized() else None
    out = {"b": b.node_id}
    c = dfc.cluster.connect(address=rc.address, tasks={"worker": 2, "ps": 1}, log_to_driver=False,
                            placement={"ps": "label:zone=b", "worker:0": "resource:machine_b", "worker:1": "label:zone=a"})
    out["where"] = c.where()

    def f(x):
        with dfc.device("ps:0/cpu:0"):
            y = x * 2.0 + 1.0
        with dfc.device("worker:1/cpu:0"):
            return dfc.reduce_sum(y * y)
    g = dfc.trace(f, dfc.TensorSpec([3], "float64"))
    out["value"] = float(dfc.Session(g, cluster=c).call(np.array([1.0, 2.0, 3.0])))
    c.restart("worker:0")
    out["restarted"] = c.where("worker:0")
    c.shutdown()
    c = dfc.cluster.connect(address=rc.address, tasks={"worker": 2}, placement={"worker": "spread"},
                            log_to_driver=False)
    out["spread"] = c.where()
    c.shutdown()
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.timeout(300)
def test_tasks_run_on_the_nodes_their_placement_names():
    pytest.importorskip("ray")
    env = dict(os.environ, PYTHONPATH=ROOT, RAY_DEDUP_LOGS="0")
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=280)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-4000:]
    out = json.loads(lines[0][len("RESULT "):])
    b, where = out["b"], out["where"]
    assert where["ps:0"] == b and where["worker:0"] == b and where["worker:1"] != b
    assert out["restarted"] == b                       # a restarted task keeps its placement
    assert out["value"] == sum((2.0 * x + 1.0) ** 2 for x in (1.0, 2.0, 3.0))
    assert len(set(out["spread"].values())) == 2       # two workers spread over the two nodes (every time)


def test_the_command_line_refuses_a_placement_without_a_cluster_or_a_bad_one(tmp_path):
    from click.testing import CliRunner
    from dfc.cli import main
    g = dfc.trace(lambda x: x * 2.0, dfc.TensorSpec([], "float32"))
    path = str(tmp_path / "g.json")
    dfc.save(g, path)
    r = CliRunner().invoke(main, ["run", path, "-i", "x=1.0", "--place", "ps=spread"])
    assert r.exit_code == 2 and "--place needs --cluster" in r.output
    r = CliRunner().invoke(main, ["run", path, "-i", "x=1.0", "--cluster", "local", "--tasks", "worker=1",
                                  "--place", "chief=spread"])
    assert r.exit_code != 0 and "neither a job nor a task" in r.output   # refused before Ray starts
