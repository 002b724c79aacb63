"""Layering: autograph imports the compiler modules it uses, never the top-level `dfc` package.

`import dfc` re-exports lazily; going through it from inside the compiler hides which module
a helper really depends on and invites import cycles.
"""
import ast
import pathlib

import dfc

PACKAGE = pathlib.Path(dfc.__file__).parent
AUTOGRAPH = PACKAGE / "compiler" / "autograph"


def _is_submodule(name):
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def _top_level_imports(path):
    """(line, text) of each import of the `dfc` package itself or of a name it re-exports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name == "dfc"]
        elif isinstance(node, ast.ImportFrom) and node.module == "dfc" and node.level == 0:
            found += [(node.lineno, f"from dfc import {a.name}") for a in node.names
                      if not _is_submodule(a.name)]
    return found


def test_autograph_does_not_import_the_top_level_package():
    files = sorted(AUTOGRAPH.rglob("*.py"))
    assert len(files) > 20
    bad = [f"{p.relative_to(PACKAGE)}:{line}: {text}" for p in files for line, text in _top_level_imports(p)]
    assert bad == []


def test_the_check_sees_a_top_level_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import dfc\nfrom dfc import cond\nfrom dfc import nest\n")
    assert _top_level_imports(p) == [(1, "import dfc"), (2, "from dfc import cond")]
