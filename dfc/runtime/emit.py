"""The one way dfc writes Python source that it runs (fused frames and roots, GPU chains, numba modules).

Graph files are untrusted, and generated source is executed, so no string from a graph (node and frame
names, attributes, dtypes, device or container names) may become source text. Everything a generator
writes is a `Code`: text this module made. Only these make Code:

- `ident(base, *numbers)`: an identifier, `base` (letters and underscores, written in the generator)
  followed by non-negative ints joined by "_", e.g. ident("v", 12, 0) -> v12_0;
- `lit(value)`: the repr of a validated Python number, bool or None, or a tuple of them;
- `blob(data)`: bytes as a hex string literal (only [0-9a-f] between the quotes), for data that compiled
  code must carry in its source (a numba module is cached on disk and runs without dfc's Python objects);
- `dtype(name)`: the name of one of dfc's array dtypes (dfc.ir.dtypes.ALL), e.g. for `np.<name>`;
- `fmt(template, *parts)` / `join(sep, parts)`: a template or separator written in the generator (a
  string constant: tests/runtime/test_codegen_sources.py checks every call) with Code in its `{}` holes.

`Lines.w` adds one line (the same rule); `source(lines)` joins them after checking that every line is
Code of printable ASCII; `run(src, env)` is the only place such source is compiled and executed. A value
generated code needs at run time that came from the graph (a node for an error message) is passed in
`env` as data, looked up by an index the generator wrote with `lit`.
"""
import math
import re

import numpy as np

_BASE = re.compile(r"[A-Za-z_]+\Z")
_PRINTABLE = re.compile(r"[ -~]*\Z")      # one line of printable ASCII: no newline, NUL or U+2028


class EmitError(Exception):
    """A generator tried to write something the emitter does not make (a bug in dfc, never user input:
    every graph value reaches generated code through ident/lit/blob or as data)."""


class Code(str):
    """Source text the emitter made (see the module docstring); never construct one elsewhere."""
    __slots__ = ()


def _code(text):
    if not _PRINTABLE.match(text):
        raise EmitError(f"generated text is not one line of printable ASCII: {text[:80]!r}")
    return Code(text)


# Templates, separators and identifier bases checked once each (they are constants of the generators, so
# these stay small; what is built from checked pieces and Code is printable ASCII without another check).
_CHECKED = {}
_BASES = set()


def _pieces(template):
    """The template's text between its `{}` holes, each piece checked to be printable ASCII."""
    pieces = _CHECKED.get(template)
    if pieces is None:
        if type(template) is not str:
            raise EmitError(f"a template must be a str constant, not a {type(template).__name__}")
        pieces = [_code(p) for p in template.split("{}")]
        if len(_CHECKED) < 100_000:
            _CHECKED[template] = pieces
    return pieces


def _int(n):
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise EmitError(f"not an int: {type(n).__name__}")
    return int(n)


def ident(base, *numbers, tail=""):
    """The identifier base + numbers joined by "_" + tail, e.g. ident("v", 3, 0) -> v3_0."""
    if type(base) is not str or type(tail) is not str:
        raise EmitError("an identifier's base and tail are str constants")
    if (base, tail) not in _BASES:
        if not _BASE.match(base) or (tail and not _BASE.match(tail)):
            raise EmitError(f"bad identifier base {base!r}{tail!r}"[:120])
        _BASES.add((base, tail))
    nums = [_int(n) for n in numbers]
    if any(n < 0 for n in nums):
        raise EmitError("negative number in an identifier")
    return Code(base + "_".join([str(n) for n in nums]) + tail)


def lit(value):
    """A literal of a Python/numpy int, float, bool or None, or a tuple/list of them (rendered as a
    tuple)."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return _code(repr(None if value is None else bool(value)))
    if isinstance(value, (int, np.integer)):
        return Code(repr(int(value)))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return _code("float('nan')")
        if math.isinf(v):
            return _code("float('inf')" if v > 0 else "-float('inf')")
        return _code(repr(v))
    if isinstance(value, (tuple, list)):
        return _code("(" + "".join(lit(x) + ", " for x in value) + ")")
    raise EmitError(f"no literal for a {type(value).__name__}")


def blob(data):
    """A string literal of bytes `data` as hex digits (bytes.fromhex reads it back)."""
    if not isinstance(data, (bytes, bytearray)):
        raise EmitError("blob needs bytes")
    return _code("'" + bytes(data).hex() + "'")


def dtype(name):
    """The name of one of dfc's array dtypes (float32, float64, int32, int64, bool), and nothing else."""
    from dfc.ir.dtypes import ALL
    if type(name) is not str or name not in ALL:
        raise EmitError(f"not one of dfc's dtypes: {str(name)[:40]!r}")
    return _code(name)


def _parts(parts):
    for p in parts:
        if type(p) is not Code:
            raise EmitError(f"a {type(p).__name__} that the emitter did not make: {str(p)[:80]!r}")
    return parts


def fmt(template, *parts):
    """The template (a constant of the generator) with each `{}` replaced by the next part (Code)."""
    pieces = _pieces(template)
    if len(pieces) != len(parts) + 1:
        raise EmitError(f"template {template!r} has {len(pieces) - 1} holes for {len(parts)} parts")
    _parts(parts)
    out = [pieces[0]]
    for p, piece in zip(parts, pieces[1:]):
        out += [p, piece]
    return Code("".join(out))


def subst(template, *parts):
    """The template (a constant of the generator) with each `{k}` (k a digit) replaced by parts[k] (Code):
    for templates that use a part more than once."""
    _parts(parts)
    try:
        return _code(re.sub(r"\{(\d)\}", lambda m: parts[int(m.group(1))], template))
    except IndexError:
        raise EmitError(f"template {template!r} has more holes than its {len(parts)} parts") from None


def join(sep, parts):
    """The parts (Code) joined by the separator (a constant of the generator)."""
    return Code("{}".join(_pieces(sep)).join(_parts(list(parts))))


def items(parts):
    """The parts (Code) each followed by ", ": the items of a tuple, list or call ("a, b, ")."""
    return Code("".join([p + ", " for p in _parts(list(parts))]))


def indent(levels):
    """Indentation of `levels` blocks."""
    return _code("    " * _int(levels))


def deeper(ind):
    """Indentation one block deeper than ind."""
    return Code(_parts([ind])[0] + "    ")


class Lines(list):
    """Generated lines; `w(ind, template, *parts)` adds indentation ind and fmt(template, *parts)."""

    def w(self, ind, template, *parts):
        self.append(Code(_parts([ind])[0] + fmt(template, *parts)))

    def add(self, line):
        """Add a line made by fmt (or a generator's Lines)."""
        self.append(_parts([line])[0])


def source(lines):
    """The text of the generated lines, checked: each is Code of printable ASCII."""
    for line in _parts(list(lines)):
        _code(line)
    return Code("\n".join(lines))


# What a numba module (compiled/codegen.py, root.py) may hold besides names, numbers and operators: its
# header's imports, comments naming nodes and frames by index, plain single-quoted strings without escapes
# (the lowerings' fixed messages and numba type names, blob's hex digits).
_HEADER = ("import numpy as np", "import numba", "from numba import njit",
           "from dfc.runtime.compiled import helpers as H, npcall as P")
_COMMENT = re.compile(r"# (node \d+|loop frame \d+|the root frame)\Z")
_STRING = re.compile(r"'[^'\\]*'\Z")
_BANNED = frozenset({"import", "exec", "eval", "compile", "open", "getattr", "setattr", "globals", "locals",
                     "vars", "breakpoint", "input", "lambda", "global", "nonlocal", "del"})


def check_module(lines):
    """The text of a generated numba module, checked token by token: its lines are printable ASCII; only
    its header imports; comments and strings are of the forms above; no dunder name or banned builtin. The
    numba generators build every line as the other generators do (Code from constant templates filled with
    the emitter's identifiers, literals, blobs and dtype names); this check is a second guard: any other text
    (a regression) is an EmitError, never code."""
    import io
    import tokenize
    for line in _parts(list(lines)):
        _code(line)
    text = "\n".join(lines)
    body = text
    for h in _HEADER:
        body = body.replace(h + "\n", "", 1)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(body).readline))
    except (tokenize.TokenError, SyntaxError) as e:
        raise EmitError(f"generated module does not tokenize: {e}") from None
    for tok in tokens:
        bad = (tok.type == tokenize.COMMENT and not _COMMENT.match(tok.string)
               or tok.type == tokenize.STRING and not _STRING.match(tok.string)
               or tok.type == tokenize.NAME and (tok.string in _BANNED or tok.string.startswith("__"))
               or tok.type == tokenize.ERRORTOKEN or tok.type not in _TOKENS)
        if bad:
            raise EmitError(f"generated module holds {tokenize.tok_name[tok.type]} {tok.string[:40]!r}")
    return Code(text)


def _token_types():
    import tokenize
    return frozenset({tokenize.NAME, tokenize.NUMBER, tokenize.OP, tokenize.STRING, tokenize.COMMENT,
                      tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER})


_TOKENS = _token_types()


def run(src, env, what):
    """Execute generated source `src` (from `source`) in namespace env. what: a fixed label for
    tracebacks (the generator's kind, never a name from the graph)."""
    if type(src) is not Code or not _BASE.match(what.replace(" ", "_")):
        raise EmitError("run takes the emitter's source and a plain label")
    exec(compile(src, f"<dfc {what}>", "exec"), env)   # noqa: S102 — Code: made here, no graph text
    return env
