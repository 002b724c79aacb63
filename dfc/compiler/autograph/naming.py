"""One namer per converted function hands out fresh, readable identifiers."""
import gast


class Namer:
    def __init__(self, tree, reserved=("ag__",)):
        self.used = set(reserved)
        for node in gast.walk(tree):
            if isinstance(node, gast.Name):
                self.used.add(node.id)
            elif isinstance(node, (gast.FunctionDef, gast.ClassDef)):
                self.used.add(node.name)
            elif isinstance(node, (gast.Global, gast.Nonlocal)):
                self.used.update(node.names)

    def new(self, base):
        candidate, n = base, 1
        while candidate in self.used:
            candidate = f"{base}_{n}"
            n += 1
        self.used.add(candidate)
        return candidate
