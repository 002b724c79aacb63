"""f-strings in converted code: Python's formatting, or text printed when the graph runs.

`f"a{x:>4}b"` is converted to
`ag__.format_string("a", ag__.format_value(x, -1, ">4"), "b")`, which is
exactly Python's f-string for Python values. A symbolic tensor has no value
while tracing, so `f"loss {t}"` becomes a SymbolicString: text and tensors
that `print` (converted) and `dfc.print` format when the graph runs, as
`str(numpy value)`. Anything else done with it (str(), +, len, a format
spec or !r on the tensor) is a DfcError at the user's line.
"""
from dfc.compiler.autograph import core
from dfc.compiler.autograph.errors import DfcConversionError
from dfc.compiler.autograph.origin import user_location

_CONVERSIONS = {-1: None, 115: str, 114: repr, 97: ascii}


class SymbolicString:
    """An f-string with symbolic tensors in it: `parts` are str and tensors, in order."""

    def __init__(self, parts):
        self.parts = parts

    def _dfc_print_parts(self):
        return list(self.parts)

    def _fail(self, *args, **kwargs):
        raise DfcConversionError(
            "an f-string of a symbolic tensor has no text while tracing (the tensor's value is "
            "known only when the graph runs); it can only be printed: print(f'...') or "
            "dfc.print(f'...'). To use the text in Python, compute the value outside the "
            "dfc.function", loc=user_location())

    __str__ = __format__ = __len__ = __add__ = __radd__ = __mul__ = __rmul__ = _fail
    __iter__ = __getitem__ = __contains__ = __bool__ = __mod__ = _fail

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        self._fail()

    def __repr__(self):
        return f"SymbolicString({self.parts!r})"


def _is_symbolic(value):
    return core.is_tensor(value) or isinstance(value, SymbolicString)


def format_value(value, conversion, spec):
    """One `{value!conversion:spec}` field of an f-string."""
    if not _is_symbolic(value):
        convert = _CONVERSIONS[conversion]
        return format(convert(value) if convert else value, spec)
    if conversion not in (-1, 115) or spec:
        what = f"!{chr(conversion)}" if conversion not in (-1, 115) else f":{spec}"
        raise DfcConversionError(
            f"the f-string field {{...{what}}} formats a symbolic tensor, whose value is known "
            f"only when the graph runs; graph printing formats tensors as str(value): use "
            f"{{x}} without {what}, or round it first (dfc.round)", loc=user_location())
    return value if isinstance(value, SymbolicString) else SymbolicString([value])


def format_string(*parts):
    """The f-string made of `parts` (str, or SymbolicString from format_value)."""
    if not any(isinstance(p, SymbolicString) for p in parts):
        return "".join(parts)
    out = []
    for p in parts:
        out.extend(p.parts if isinstance(p, SymbolicString) else [p])
    return SymbolicString(out)
