"""Source conversion for dfc.function (AutoGraph-like, built on gast).

`function` is the decorator; `compile_file` traces every dfc.function of a
file and saves its graph. The pipeline is in `conversion`, the converters in
`converters/`, the runtime helpers converted code calls in `operators`.
"""


def __getattr__(name):
    if name in ("function", "Function"):
        from dfc.compiler.autograph import function as mod
        return getattr(mod, name)
    if name == "compile_file":
        from dfc.compiler.autograph.compile_file import compile_file
        return compile_file
    if name == "convert":
        from dfc.compiler.autograph.conversion import convert
        return convert
    raise AttributeError(name)
