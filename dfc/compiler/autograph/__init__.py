"""Source conversion for dfc.function (AutoGraph-like, built on gast).

`function` is the decorator; `compile_file` traces every dfc.function of a
file and saves its graph. The pipeline is in `conversion`, the converters in
`converters/`, the runtime helpers converted code calls in `operators`.

The submodules `function` and `compile_file` share their names with what
they define; importing them here makes the package attributes the
decorator and the function (use importlib for the modules themselves).
"""
from dfc.compiler.autograph.function import Function, function  # noqa: E402
from dfc.compiler.autograph.compile_file import compile_file  # noqa: E402

__all__ = ["function", "Function", "compile_file"]
