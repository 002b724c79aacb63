"""Environment variables: dfc/config.py alone reads the DFC_* ones, each declared with one rule per kind,
and docs/settings.md's table is what the declarations render."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

from dfc import config
from dfc.errors import DfcError

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dfc"
# Modules that may read DFC_* variables from an environment, and why.
ALLOWED = {"dfc/config.py": "the settings module: it declares and parses every DFC_* variable"}
BOOLS = [s.name for s in config.SETTINGS.values() if s.kind == "bool"]
SPELLINGS = {True: ("1", "true", "yes", "on", "TRUE", " On ", "Yes"), False: ("0", "false", "no", "off", "FALSE", " Off")}


def _constants(tree):
    """Module-level names bound to a string (ENV = "DFC_PROGRESS")."""
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets if isinstance(t, ast.Name)}


def _is_environ(node):
    """os.environ, environ or os.getenv/os.environ.get-like receivers."""
    text = ast.unparse(node)
    return text == "environ" or text.endswith(".environ")


def _env_keys(tree):
    """(line, key expression) of every read of an environment: environ.get/pop/setdefault(key),
    os.getenv(key), environ[key], key in environ."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and (
                (n.func.attr in ("get", "pop", "setdefault") and _is_environ(n.func.value))
                or ast.unparse(n.func) in ("os.getenv", "getenv")):
            yield n.lineno, n.args[0]
        elif isinstance(n, ast.Subscript) and _is_environ(n.value):
            yield n.lineno, n.slice
        elif isinstance(n, ast.Compare) and any(_is_environ(c) for c in n.comparators):
            yield n.lineno, n.left


def _dfc_reads(path):
    tree = ast.parse(path.read_text(), str(path))
    names = _constants(tree)
    for line, key in _env_keys(tree):
        value = key.value if isinstance(key, ast.Constant) else names.get(getattr(key, "id", None), "")
        if not isinstance(value, str) or value.startswith("DFC_") or not isinstance(key, (ast.Constant, ast.Name)):
            yield line, ast.unparse(key)     # a DFC_ name, or a key this scan cannot tell is not one


def test_no_module_but_config_reads_a_dfc_variable():
    found = [f"{p.relative_to(ROOT)}:{line}: {key}" for p in sorted(PACKAGE.rglob("*.py"))
             if str(p.relative_to(ROOT)) not in ALLOWED for line, key in _dfc_reads(p)]
    assert found == [], "read these through dfc.config.env (declare them in config.SETTINGS):\n" + "\n".join(found)


def test_the_scan_finds_each_form_of_reading():
    src = ('import os\nENV = "DFC_X"\nos.environ.get("DFC_A")\nos.getenv("DFC_B")\nos.environ["DFC_C"]\n'
           '"DFC_D" in os.environ\nos.environ.get(ENV)\nenviron.get("DFC_E", "1")\nos.environ.get("HOME")\n')
    tree = ast.parse(src)
    names = _constants(tree)
    keys = [k.value if isinstance(k, ast.Constant) else names.get(k.id) for _, k in _env_keys(tree)]
    assert sorted(keys) == ["DFC_A", "DFC_B", "DFC_C", "DFC_D", "DFC_E", "DFC_X", "HOME"]


def test_every_dfc_name_in_the_package_is_declared():
    """A DFC_* string anywhere in dfc/'s code (not its docstrings) names a declared variable."""
    undeclared = set()
    for p in PACKAGE.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"DFC_[A-Z_]+", n.value):
                undeclared |= {n.value} - set(config.SETTINGS)
    assert undeclared == set()


def test_every_declaration_is_complete():
    for s in config.SETTINGS.values():
        assert s.kind in ("bool", "int", "float", "str", "choice", "path") and s.when in ("import", "use"), s.name
        assert s.doc.strip() and "|" not in s.doc, s.name
        assert config.env(s.name, {}) == s.default == config.env(s.name, {s.name: ""})     # unset, empty
        if s.kind != "path":                                    # a path keeps its spaces
            assert config.env(s.name, {s.name: "  "}) == s.default


@pytest.mark.parametrize("name", BOOLS)
def test_booleans_accept_every_spelling_and_refuse_others(name):
    for value, spellings in SPELLINGS.items():
        for raw in spellings:
            assert config.env(name, {name: raw}) is value, raw
    for bad in ("2", "enabled", "y", "-1"):
        with pytest.raises(DfcError, match=f"{name}='{bad}': use one of 1/true/yes/on or 0/false/no/off"):
            config.env(name, {name: bad})
    if config.SETTINGS[name].auto:
        assert config.env(name, {name: " Auto "}) == "auto"
    else:
        with pytest.raises(DfcError, match=name):
            config.env(name, {name: "auto"})


def test_numbers_and_choices_name_the_variable():
    assert config.env("DFC_NUM_THREADS", {"DFC_NUM_THREADS": " 3 "}) == 3
    assert config.env("DFC_COMPILE_BUDGET", {"DFC_COMPILE_BUDGET": "1.5"}) == 1.5
    assert config.env("DFC_EXECUTOR", {"DFC_EXECUTOR": "Reference"}) == "reference"
    for name, bad in (("DFC_NUM_THREADS", "-1"), ("DFC_NUM_THREADS", "many"), ("DFC_COMPILE_BUDGET", "lots"),
                      ("DFC_CLUSTER_LIVENESS_TIMEOUT", "0"), ("DFC_EXECUTOR", "fast"),
                      ("DFC_DEFAULT_FLOAT", "float16")):
        with pytest.raises(DfcError, match=f"{name}='{bad}': use "):
            config.env(name, {name: bad})


def test_switches_read_at_import_take_every_boolean_spelling():
    """DFC_COMPILED_FUSION=false and DFC_COMPILED_BUFFERS=false turn those off (they once compared with
    "0" only), as do spellings in other cases or with spaces for the other switches read at import."""
    env = dict(os.environ, DFC_COMPILED_FUSION="false", DFC_COMPILED_BUFFERS="false", DFC_FOLD_CONSTANTS="OFF",
               DFC_COMPILE_ROOT=" no ", PYTHONPATH=str(ROOT))
    code = ("import dfc.runtime.compiled.fusion as f, dfc.runtime.compiled.buffers as b, "
            "dfc.runtime.folding as fo, dfc.runtime.compiled.root as r; print(f.ENABLED, b.ENABLED, fo.ENABLED, "
            "r.ENABLED)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"] * 4


def test_switches_read_at_use_follow_the_environment(monkeypatch):
    from dfc.compiler.autodiff import loop_matmul
    from dfc.runtime import gpu_fusion
    monkeypatch.setenv("DFC_BATCH_LOOP_GRADS", "False")
    monkeypatch.setenv("DFC_FUSE_ELEMENTWISE", "no")
    assert not loop_matmul.enabled() and not gpu_fusion.enabled()
    monkeypatch.setenv("DFC_BATCH_LOOP_GRADS", "on")
    assert loop_matmul.enabled()


def test_the_docs_table_is_what_the_declarations_render():
    page = (ROOT / "docs" / "settings.md").read_text()
    table = re.search(r"<!-- settings-table: start -->\n(.*)<!-- settings-table: end -->", page, re.S)
    assert table, "docs/settings.md lost its settings-table markers"
    assert table.group(1) == config.settings_table(), (
        "docs/settings.md is out of date: regenerate its table with "
        "python -c \"import dfc.config as c; print(c.settings_table(), end='')\"")
    assert "settings.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_docs_options_table_is_what_run_options_declare():
    from dfc.runtime.options import options_table
    page = (ROOT / "docs" / "settings.md").read_text()
    table = re.search(r"<!-- options-table: start -->\n(.*)<!-- options-table: end -->", page, re.S)
    assert table, "docs/settings.md lost its options-table markers"
    assert table.group(1) == options_table(), "docs/settings.md's options table is out of date"


def test_session_options_come_as_one_object_or_as_keywords():
    import numpy as np
    import dfc
    g = dfc.trace(lambda x: x * 2.0, dfc.TensorSpec([], "float64"))
    opts = dfc.RunOptions(num_threads=0, mode="reference")
    s = dfc.Session(g, options=opts, mode="threads")            # the keyword wins
    assert (s.mode, s._num_threads, s.options.num_threads) == ("threads", 0, 0)
    assert dfc.Session(g, options={"mode": "reference"}).mode == "reference"
    assert s.call(np.float64(2.0)) == 4.0
    with pytest.raises(dfc.DfcError, match="unknown Session option num_thread .*num_threads"):
        dfc.Session(g, num_thread=0)
    with pytest.raises(dfc.DfcError, match="options must be a dfc.RunOptions"):
        dfc.Session(g, options=3)
