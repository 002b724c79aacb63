"""compile_file: trace every dfc.function of a Python file and save its graph.

`dfc compile FILE.py [-f NAME]... [-o PATH]` calls this. Functions with an
input_signature are compiled (or exactly the `names` given); each graph is
written to OUT_DIR/NAME.json, NAME being the Python function's name.
"""
import importlib.util
import os
import sys

from dfc.errors import DfcError, DfcInputError
from dfc.compiler.autograph.function import Function


def load_module(path):
    """Import the file at `path` as a fresh module (its folder on sys.path meanwhile)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise DfcInputError(f"no such file: {path}")
    name = "dfc_compiled_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except DfcError:
        raise
    except SyntaxError as e:
        raise DfcInputError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def find_functions(module, names=None):
    """[(name, Function)] of the module: those with an input_signature, or `names`."""
    found = {}
    for attr, value in vars(module).items():
        if isinstance(value, Function):
            found.setdefault(value.__name__, value)
            found.setdefault(attr, value)
    if names:
        missing = [n for n in names if n not in found]
        if missing:
            raise DfcInputError(f"no dfc.function named {missing[0]!r} in {module.__file__}")
        chosen = [(n, found[n]) for n in names]
        for n, f in chosen:
            if f.input_signature is None:
                raise DfcInputError(f"dfc.function {n!r} has no input_signature, so it cannot be "
                                    f"compiled ahead of time; add input_signature=[dfc.TensorSpec(...)]")
        return chosen
    seen, out = set(), []
    for attr, value in vars(module).items():
        if isinstance(value, Function) and value.input_signature is not None and id(value) not in seen:
            seen.add(id(value))
            out.append((value.__name__, value))
    return out


def compile_file(path, names=None, out_dir="."):
    """Trace and save; returns [(name, json_path, graph)] in file order."""
    import dfc
    module = load_module(path)
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for name, fn in find_functions(module, names):
        graph = fn.trace()
        json_path = os.path.join(out_dir, f"{name}.json")
        dfc.save(graph, json_path)
        results.append((name, json_path, graph))
    return results
