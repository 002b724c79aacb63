"""Reject syntax that cannot be converted, with the user's line: `yield` and
global/nonlocal writes in converted blocks. (Control flow inside `try` is
converted; only a tensor if/loop there is an error, raised while tracing.)"""
import gast

from dfc.compiler.autograph import analysis
from dfc.compiler.autograph.transformer import Converter, walk_no_nested


class Checks(Converter):
    def visit_Yield(self, node):
        raise self.error(node, "`yield` is not supported in dfc.function; "
                               "return a list or use dfc.TensorArray instead")

    visit_YieldFrom = visit_Yield

    def visit_FunctionDef(self, node):
        declared = {}
        for child in walk_no_nested(node):
            if isinstance(child, (gast.Global, gast.Nonlocal)):
                for name in child.names:
                    declared[name] = type(child).__name__.lower()
        if declared:
            for child in walk_no_nested(node):
                if isinstance(child, (gast.If, gast.While, gast.For)):
                    bad = sorted(analysis.modified(child) & set(declared))
                    if bad:
                        kind = declared[bad[0]]
                        raise self.error(child, f"{kind} variable '{bad[0]}' is written inside "
                                                f"converted control flow; pass it in as an "
                                                f"argument and return the new value instead")
        self.generic_visit(node)
        return node
