"""The differential suite keeps its size when its files change: all test_autograph_diff_*.py together."""
import importlib
import pathlib


def _suites():
    here = pathlib.Path(__file__).parent
    return [importlib.import_module(f"tests.compiler.{p.stem}") for p in sorted(here.glob("test_autograph_diff_*.py"))
            if p.stem != "test_autograph_diff_count"]


def test_case_count():
    names = [fn.__name__ for suite in _suites() for fn, _ in suite.CASES]
    assert len(names) == len(set(names)), "two cases share a name"
    assert len(names) >= 80
