"""JSON format: deterministic, byte-identical round trip, and every malformed input is a DfcError."""
import copy
import json

import numpy as np
import pytest

import dfc
from dfc.ir import serialize


def sample_graph():
    def f(x, n):
        def body(i, s):
            s = dfc.cond(i % 2 == 0, lambda: s + x, lambda: s * 1.5)
            return i + 1, s
        i, s = dfc.while_loop(lambda i, s: i < n, body, (0, dfc.zeros([3])))
        return {"s": s, "i": i, "const": np.arange(3, dtype=np.int32)}
    return dfc.trace(f, dfc.TensorSpec([3], "float32"), dfc.TensorSpec([], "int64"))


def test_round_trip_is_byte_identical_and_deterministic(tmp_path):
    text = serialize.to_json(sample_graph())
    assert serialize.to_json(sample_graph()) == text            # same program -> same file
    again = serialize.to_json(serialize.from_json(text))
    assert again == text
    path = tmp_path / "g.json"
    dfc.save(sample_graph(), str(path))
    assert path.read_text() == text


def test_loaded_graph_gives_same_results(tmp_path):
    g = sample_graph()
    path = tmp_path / "g.json"
    dfc.save(g, str(path))
    h = dfc.load(str(path))
    x = np.array([1, 2, 3], np.float32)
    a, b = g(x, 5), h(x, 5)
    assert list(a) == list(b) == ["s", "i", "const"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


def test_constants_inline_little_endian():
    g = sample_graph()
    doc = json.loads(serialize.to_json(g))
    consts = [n for n in doc["nodes"] if n["op"] == "Const"]
    assert consts and all(set(n["attrs"]["value"]) == {"dtype", "shape", "data"} for n in consts)
    big = np.arange(5, dtype=">f8")
    enc = serialize.encode_tensor(big)
    np.testing.assert_array_equal(serialize.decode_tensor(enc), big)


def _doc():
    return json.loads(serialize.to_json(sample_graph()))


def _node(doc, op):
    return next(n for n in doc["nodes"] if n["op"] == op)


def _mutations():
    def unknown_op(d):
        _node(d, "Add")["op"] = "Frobnicate"

    def missing_input(d):
        _node(d, "Add")["inputs"][0] = "no_such_node:0"

    def bad_attr_type(d):
        _node(d, "Enter")["attrs"]["parallel_iterations"] = "many"

    def unknown_attr(d):
        _node(d, "Add")["attrs"]["colour"] = 1

    def dtype_mismatch(d):
        _node(d, "Placeholder")["attrs"]["dtype"] = "int32"   # x feeds a float32 Add

    def cycle_without_next_iteration(d):
        a, b = [n for n in d["nodes"] if n["op"] in ("Add", "Mul")][:2]
        a["inputs"][0] = b["name"] + ":0"
        b["inputs"][0] = a["name"] + ":0"

    def duplicate_name(d):
        d["nodes"].append(copy.deepcopy(d["nodes"][0]))

    def bad_base64(d):
        _node(d, "Const")["attrs"]["value"]["data"] = "!!!"

    def wrong_version(d):
        d["version"] = 99

    def wrong_format(d):
        d["format"] = "onnx"

    def bad_port(d):
        _node(d, "Add")["inputs"][0] = _node(d, "Add")["inputs"][0].split(":")[0] + ":7"

    def missing_required_attr(d):
        del _node(d, "Enter")["attrs"]["frame_name"]

    def merge_without_next_iteration(d):
        m = _node(d, "Merge")
        m["inputs"][1] = m["inputs"][0]

    return [unknown_op, missing_input, bad_attr_type, unknown_attr, dtype_mismatch,
            cycle_without_next_iteration, duplicate_name, bad_base64, wrong_version, wrong_format, bad_port,
            missing_required_attr, merge_without_next_iteration]


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_malformed_graph_is_a_dfc_error(mutate, tmp_path):
    d = _doc()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(dfc.DfcError) as e:
        dfc.load(str(path))
    assert not isinstance(e.value, (KeyError, TypeError, ValueError))


def test_dtype_mismatch_names_node():
    d = _doc()
    _node(d, "Placeholder")["attrs"]["dtype"] = "int32"
    with pytest.raises(dfc.DfcTypeError, match="one dtype") as e:
        serialize.from_json(json.dumps(d))
    assert e.value.node == "add"


def test_invalid_json_and_missing_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(dfc.DfcGraphError, match="invalid JSON"):
        dfc.load(str(p))
    with pytest.raises(dfc.DfcError, match="cannot read"):
        dfc.load(str(tmp_path / "missing.json"))
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(dfc.DfcError):
        dfc.load(str(p))


def test_error_names_the_bad_node(tmp_path):
    d = _doc()
    add = _node(d, "Add")
    add["op"] = "Frobnicate"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(dfc.DfcGraphError) as e:
        dfc.load(str(p))
    assert e.value.node == add["name"] and add["name"] in str(e.value)
