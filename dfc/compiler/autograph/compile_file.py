"""compile_file: trace every dfc.function of a Python file and save its graph.

`dfc compile FILE.py [-f NAME]... [-o PATH]` calls this. Functions with an
input_signature are compiled (or exactly the `names` given); each graph is
written to OUT_DIR/NAME.json, NAME being the Python function's name.

Whatever the user's module raises while it is imported or traced (or a
sys.exit it calls) becomes a DfcUserCodeError whose message shows the frames
of the user's own files only, mapped from converted code back to the user's
lines: the user's mistake, not dfc's machinery.
"""
import importlib.machinery
import importlib.util
import linecache
import os
import sys
import sysconfig
import traceback

from dfc.errors import DfcError, DfcInputError
from dfc.ir import serialize
from dfc.compiler.autograph import origin
from dfc.compiler.autograph.function import Function

_DFC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Frames from these folders (dfc itself, the standard library, installed packages) are not the user's.
_NOT_USER = tuple({os.path.realpath(p) + os.sep for p in [_DFC_DIR] + [
    sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]})
_MAX_FRAMES = 8


class DfcUserCodeError(DfcError):
    """The user's module raised, or called sys.exit, while dfc imported or traced it."""


def load_module(path):
    """Import the file at `path` as a fresh module (its folder on sys.path meanwhile)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise DfcInputError(f"no such file: {path}")
    _check_source(path)
    name = "dfc_compiled_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_").replace(".", "_")
    # An explicit loader, so that a file without the .py suffix is read as Python too.
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)
        if isinstance(e, SyntaxError):      # in a module the user's file imports
            raise DfcInputError(f"{e.filename}:{e.lineno}: syntax error: {e.msg}") from None
        if isinstance(e, DfcError):
            add_user_loc(e, path)
        if isinstance(e, (DfcError, KeyboardInterrupt)):
            raise
        raise user_code_error(e, f"dfc imported {os.path.basename(path)}", path) from e
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def _check_source(path):
    """A DfcInputError unless `path` is readable Python source (before any of it runs)."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise DfcInputError(f"cannot read {path}: {e.strerror}") from None
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"{path}:{e.lineno}" if e.lineno else path
        raise DfcInputError(f"{where}: syntax error: {e.msg}") from None
    except ValueError as e:      # null bytes in Python < 3.12: a binary file
        raise DfcInputError(f"{path} is not a Python source file ({e})") from None


def user_code_error(exc, while_doing, path):
    """A DfcUserCodeError for `exc` raised by user code, showing the user's frames only."""
    frames = user_frames(exc.__traceback__, path)
    loc = f"{os.path.basename(frames[-1][0])}:{frames[-1][1]}" if frames else None
    if isinstance(exc, SystemExit):
        head = (f"sys.exit({exc.code!r}) called while {while_doing}; dfc does not run script code: "
                f"put it under `if __name__ == \"__main__\":`")
    else:
        head = f"{type(exc).__name__} while {while_doing}: {exc}"
    lines = [head]
    for filename, lineno, func in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {func}')
        text = linecache.getline(filename, lineno).strip()
        if text:
            lines.append(f"    {text}")
    lines.append("(dfc --debug compile ... shows the full traceback, dfc's own frames included)")
    return DfcUserCodeError("\n".join(lines), loc=loc)


def add_user_loc(e, path):
    """Locate a DfcError that names no place at the user's innermost frame (file:line)."""
    if e.loc is not None or e.node is not None:
        return
    frames = user_frames(e.__traceback__, path)
    if frames:
        e.loc = f"{os.path.basename(frames[-1][0])}:{frames[-1][1]}"
        e.args = (e._format(),)


def user_frames(tb, path=None):
    """[(file, line, function)] of the traceback's frames in the user's files, innermost last.

    Frames of converted code are mapped back to the user's line; frames of dfc,
    the standard library and installed packages are left out."""
    out = []
    for frame, lineno in traceback.walk_tb(tb):
        filename, func = frame.f_code.co_filename, frame.f_code.co_name
        mapped = origin.map_frame(filename, lineno)
        if mapped is not None:
            func = origin.user_function_name(filename) or func    # not a converter-made if_body_1
            filename, lineno = mapped
        elif not _is_user_file(filename, path):
            continue
        if not out or out[-1] != (filename, lineno, func):   # a branch function on the same line
            out.append((filename, lineno, func))
    return out[-_MAX_FRAMES:]


def _is_user_file(filename, path):
    if filename.startswith("<"):
        return False
    full = os.path.realpath(filename)
    if path is not None and full == os.path.realpath(path):
        return True
    return not full.startswith(_NOT_USER)


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


def make_output_dir(out_dir):
    """Create `out_dir` (and its parents); a DfcError naming it when that is impossible."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise DfcInputError(f"cannot create output directory {out_dir}: {e.strerror}") from None
    if not os.path.isdir(out_dir):
        raise DfcInputError(f"output directory {out_dir} is not a directory")


def compile_file(path, names=None, out_dir="."):
    """Trace and save; returns [(name, json_path, graph)] in file order."""
    make_output_dir(out_dir)
    module = load_module(path)
    results = []
    for name, fn in find_functions(module, names):
        graph = _trace(fn, name, path)
        json_path = os.path.join(out_dir, f"{name}.json")
        serialize.save(graph, json_path)
        results.append((name, json_path, graph))
    return results


def _trace(fn, name, path):
    try:
        return fn.trace()
    except DfcError as e:
        add_user_loc(e, path)
        raise
    except (Exception, SystemExit) as e:
        raise user_code_error(e, f"tracing dfc.function {name!r}", path) from e
