"""`dfc compile` + `dfc run` give the same results as plain Python for a subset of programs."""
import json

import numpy as np
import pytest

from tests import clitools
from tests.compiler import cli_programs as P


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("compiled")
    summary = clitools.dfc_ok("compile", "tests/compiler/cli_programs.py", "-o", str(out))
    return out, summary


def flat(v):
    if isinstance(v, (tuple, list)):
        return [y for x in v for y in flat(x)]
    return [np.asarray(v).tolist()]


CASES = [("first_square_above", {"n": 50}), ("first_square_above", {"n": 0}),
         ("sum_positive_until_negative", {"x": [1.0, 0.0, 2.5, -1.0, 7.0]}),
         ("sum_positive_until_negative", {"x": []}),
         ("nested_early_return", {"a": 5, "b": 4}), ("nested_early_return", {"a": 2, "b": 2}),
         ("mixed", {"x": [1.0, 2.0], "k": 4})]


def python_reference(name):
    if name == "mixed":     # uses dfc.stack, so spell the plain-Python meaning out with numpy
        return lambda x, k: (np.stack([x * i if i % 2 == 0 and i > 0 else x for i in range(k)]),
                             k > 2 or k < 0)
    return getattr(P, name).python_function


@pytest.mark.parametrize("name,inputs", CASES)
def test_compiled_graph_matches_python(compiled, name, inputs):
    out, summary = compiled
    assert f"{name}: " in summary
    args = ["run", str(out / f"{name}.json"), "--json"]
    for k, v in inputs.items():
        args += ["--input", f"{k}={json.dumps(v)}"]
    got = json.loads(clitools.dfc_ok(*args))["outputs"]
    py_args = [np.asarray(v, np.float32) if isinstance(v, list) else v for v in inputs.values()]
    want = flat(python_reference(name)(*py_args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=float), np.asarray(w, dtype=float), rtol=1e-6)
