"""Sentinels for variables that have no value yet."""
from dfc.compiler.autograph.errors import DfcUndefinedVariableError
from dfc.compiler.autograph.origin import user_location


class Undefined:
    """The value of a variable no definition has reached yet.

    Using it (arithmetic, truth, attributes, calls) raises a
    DfcUndefinedVariableError naming the variable, like Python's
    UnboundLocalError but pointing at the user's line.
    """

    __slots__ = ("name",)

    def __init__(self, name):
        object.__setattr__(self, "name", name)

    def _fail(self, *args, **kwargs):
        raise DfcUndefinedVariableError(
            f"variable '{self.name}' is used before it is defined (it is not set on every "
            f"path that reaches this line)", loc=user_location())

    def __getattr__(self, item):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        self._fail()

    def __repr__(self):
        return f"Undefined({self.name!r})"

    __bool__ = __call__ = __iter__ = __len__ = __getitem__ = __index__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _fail
    __pow__ = __rpow__ = __matmul__ = __rmatmul__ = __neg__ = __pos__ = __abs__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = _fail
    __int__ = __float__ = _fail


class UndefinedReturnValue:
    """The return value of a function that has not returned yet."""

    def __repr__(self):
        return "UndefinedReturnValue()"


def is_undefined(value):
    return isinstance(value, (Undefined, UndefinedReturnValue))


def retval(value):
    return None if isinstance(value, UndefinedReturnValue) else value


def ld(value):
    """A load of a variable that may be undefined: raises, naming it, if it is."""
    if isinstance(value, Undefined):
        value._fail()
    return value


def unset(load_parent, key, is_attr):
    """Remove attribute or item `key` of load_parent(), if it is there.

    set_state of a converted `if` calls this for an attribute / constant
    subscript whose saved value is undefined, so a branch that sets
    `d['k']` does not leave it behind for the other branch to find.
    """
    try:
        parent = load_parent()
    except (AttributeError, KeyError, IndexError, TypeError, DfcUndefinedVariableError):
        return  # no container: nothing to remove
    try:
        if is_attr:
            delattr(parent, key)
        else:
            del parent[key]
    except (AttributeError, KeyError, IndexError, TypeError):
        pass


def deleted(value, name):
    """`del name`, written `name = deleted(name, 'name')`: the variable must have a value (as
    in Python); afterwards it is undefined, so converted if/loops can carry the deletion."""
    ld(value)
    return Undefined(name)
