"""f.code lists the converted source of the function and of every user function it calls."""
import numpy as np

import dfc
from tests.compiler import _code_listing_helpers as helpers


def _square_if_positive(x):
    if x > 0:
        x = x * x
    return x


def _twice(x):
    return _square_if_positive(x) + helpers.plus_one_while_small(x)


class Model:
    def scale(self, x):
        while x < 10.0:
            x = x * 3.0
        return x


def test_code_includes_callees_found_by_name():
    @dfc.function
    def f(x):
        return _twice(x)
    code = f.code
    assert code.lstrip().startswith("def f(x):")
    for name in ("_twice", "_square_if_positive", "plus_one_while_small"):
        assert f"# ---- converted callee {name} (" in code, code
        assert f"def {name}(x):" in code
    assert code.count("def _square_if_positive(x):") == 1          # each callee once
    assert "ag__.if_stmt" in code.split("def _square_if_positive")[1]   # converted, not the source
    assert "ag__.while_stmt" in code.split("def plus_one_while_small")[1]


def test_code_includes_callees_seen_while_tracing():
    model = Model()

    @dfc.function
    def g(x):
        return model.scale(x)
    assert "def scale(self, x):" not in g.code           # a method: found once traced
    assert g(np.float32(2.0)) == 18.0
    assert "# ---- converted callee Model.scale (" in g.code and "ag__.while_stmt" in g.code
