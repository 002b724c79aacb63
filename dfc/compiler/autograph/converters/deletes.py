"""`del x` -> `x = ag__.deleted(x, 'x')`: a deleted variable is undefined, not unbound.

    if c:                          def if_body():
        del x            ->            nonlocal x
    else:                              x = ag__.deleted(x, 'x')
        del x                      ...

An unbound name cannot be carried through a converted if/loop (`nonlocal`
state, get_state); the Undefined sentinel can, and a later use of x raises
the usual DfcUndefinedVariableError naming it (ControlFlow wraps its loads).
Deleting attributes, items and global/nonlocal names is left as it is.
"""
import gast

from dfc.compiler.autograph import templates
from dfc.compiler.autograph.transformer import Converter, walk_no_nested


class Deletes(Converter):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.declared = [set()]

    def visit_FunctionDef(self, node):
        declared = set()
        for child in walk_no_nested(node):
            if isinstance(child, (gast.Global, gast.Nonlocal)):
                declared.update(child.names)
        self.declared.append(declared)
        self.generic_visit(node)
        self.declared.pop()
        return node

    def visit_ClassDef(self, node):
        return node  # a class body's names are its attributes

    def visit_Delete(self, node):
        out = []
        for target in node.targets:
            if isinstance(target, gast.Name) and target.id not in self.declared[-1]:
                stmts = templates.replace("name = ag__.deleted(name, label)", name=target.id,
                                          label=templates.const(target.id))
                stmts[0]._dfc_deletes = target.id
                out.extend(stmts)
            else:
                out.append(gast.Delete(targets=[target]))
        return self.mark(out, node)
