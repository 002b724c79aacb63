"""The layers of ARCHITECTURE.md: dfc.ir imports neither the compiler nor the runtime; the runtime never
imports the compiler (checked on the source, so a lazy import inside a function counts too)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "dfc"


def imported_modules(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("layer,forbidden", [("ir", ("dfc.runtime", "dfc.compiler")),
                                             ("runtime", ("dfc.compiler",))])
def test_layer_imports(layer, forbidden):
    bad = [f"{p.relative_to(ROOT.parent)} imports {m}" for p in sorted((ROOT / layer).rglob("*.py"))
           for m in imported_modules(p) if m.startswith(forbidden)]
    assert not bad, bad
