"""dfc.Checkpoint: Save / Restore + Assign of Variables from traced code (used by samples/linear_model.py)."""
import json

import numpy as np
import pytest

import dfc
from dfc.ir.serialize import to_json


def test_save_inside_a_loop_then_restore_in_another_graph(tmp_path):
    path = str(tmp_path / "ckpt.npz")
    v = dfc.Variable(np.zeros(2), name="v")
    n = dfc.Variable(np.int64(0), name="n")
    ckpt = dfc.Checkpoint([v, n])                        # named after the variables

    def count(steps):
        def body(i):
            v.assign_add(np.ones(2))
            n.assign_add(1)
            dfc.cond(i == 2, lambda: ckpt.save(path), lambda: None)   # after the third update
            return i + 1
        dfc.while_loop(lambda i: i < steps, body, (dfc.constant(0, "int64"),))
        return v.read_value()

    np.testing.assert_array_equal(dfc.trace(count, dfc.TensorSpec([], "int64"))(np.int64(5)), [5, 5])
    with np.load(path) as z:
        assert sorted(z.files) == ["n", "v"]
        np.testing.assert_array_equal(z["v"], [3, 3])

    def restore():
        restored = ckpt.restore(path)
        return restored, v.read_value() * 10             # the assign happened before this read
    (rv, rn), v10 = dfc.trace(restore)()
    np.testing.assert_array_equal(rv, [3, 3])
    assert rn == 3 and rn.dtype == np.int64
    np.testing.assert_array_equal(v10, [30, 30])


def test_dict_names_and_file_contents(tmp_path):
    path = str(tmp_path / "d.npz")
    w = dfc.Variable(np.float32(1.5), name="weights")
    ckpt = dfc.Checkpoint({"w": w})
    dfc.trace(lambda: ckpt.save(path))()
    with np.load(path) as z:
        assert z.files == ["w"] and z["w"] == np.float32(1.5)
    assert repr(ckpt) == "<dfc.Checkpoint ['w']>"


def test_errors(tmp_path):
    w = dfc.Variable(0.0, name="w")
    with pytest.raises(dfc.DfcError, match="unique"):
        dfc.Checkpoint([w, dfc.Variable(1.0, name="w")])
    with pytest.raises(dfc.DfcError, match="not a dfc.Variable"):
        dfc.Checkpoint({"x": np.zeros(2)})
    with pytest.raises(dfc.DfcError, match="must end in .npz"):
        dfc.trace(lambda: dfc.Checkpoint([w]).save(str(tmp_path / "ckpt")))
    g = dfc.trace(lambda: dfc.Checkpoint([w]).restore(str(tmp_path / "missing.npz")))
    with pytest.raises(dfc.DfcError, match="cannot restore"):
        g()


def test_a_restore_is_one_node_and_survives_a_saved_graph(tmp_path):
    np.savez(tmp_path / "ck.npz", w=np.arange(2.0), b=np.int64(7))
    w = dfc.Variable(np.zeros(2), name="w_one_restore")
    b = dfc.Variable(np.int64(0), name="b_one_restore")
    g = dfc.trace(lambda: dfc.Checkpoint({"w": w, "b": b}).restore("ck.npz"))
    assert [n.op for n in g.nodes.values()].count("Restore") == 1      # one read of the file for both
    dfc.save(g, str(tmp_path / "restore.json"))
    rw, rb = dfc.Session(dfc.load(str(tmp_path / "restore.json")), checkpoint_dir=str(tmp_path)).call()
    np.testing.assert_array_equal(rw, [0, 1])
    assert rb == 7 and rb.dtype == np.int64
    np.testing.assert_array_equal(w.numpy(), [0, 1])
    assert b.numpy() == 7


def test_a_graph_file_with_one_restore_per_variable_still_loads_and_runs(tmp_path):
    # graphs saved before a Restore read a whole checkpoint hold one Restore per variable
    np.savez(tmp_path / "ck.npz", w=np.arange(2.0), b=np.int64(7))
    w = dfc.Variable(np.zeros(2), name="w_old_restore")
    b = dfc.Variable(np.int64(0), name="b_old_restore")
    d = json.loads(to_json(dfc.trace(lambda: dfc.Checkpoint({"w": w, "b": b}).restore("ck.npz"))))
    [node] = [n for n in d["nodes"] if n["op"] == "Restore"]
    a = node["attrs"]
    old = [dict(node, name=f"{node['name']}_{k}", attrs={"path": a["path"], "name": nm, "dtype": dtp, "shape": shp})
           for k, (nm, dtp, shp) in enumerate(zip(a["names"], a["dtypes"], a["shapes"]))]
    d["nodes"] = [x for n in d["nodes"] for x in (old if n is node else [n])]

    def ref(r):           # the new node's output k is the old k-th node's output 0
        if r == "^" + node["name"]:
            return [f"^{o['name']}" for o in old]
        nm, _, port = r.rpartition(":")
        return [f"{node['name']}_{int(port)}:0" if nm == node["name"] else r]
    for n in d["nodes"]:
        n["inputs"] = [x for r in n["inputs"] for x in ref(r)]
    d["signature"]["outputs"] = json.loads(json.dumps(d["signature"]["outputs"]).replace(
        f'"{node["name"]}:1"', f'"{node["name"]}_1:0"').replace(f'"{node["name"]}:0"', f'"{node["name"]}_0:0"'))
    g = dfc.loads(json.dumps(d))
    assert [n.op for n in g.nodes.values()].count("Restore") == 2
    rw, rb = dfc.Session(g, checkpoint_dir=str(tmp_path)).call()
    np.testing.assert_array_equal(rw, [0, 1])
    assert rb == 7 and rb.dtype == np.int64
    np.testing.assert_array_equal(w.numpy(), [0, 1])
