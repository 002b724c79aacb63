"""The `ag__` namespace of converted code: every helper generated code calls."""
from dfc.compiler.autograph.calls import converted_call
from dfc.compiler.autograph.conditionals import if_exp, if_stmt, not_tensor_in_try
from dfc.compiler.autograph.logical import and_, compare_chain, not_, or_
from dfc.compiler.autograph.loops import for_stmt, while_stmt
from dfc.compiler.autograph.misc import (assert_stmt, delitem, finally_exit, ld_or_undefined,
                                         list_append,
                                         list_extend, list_pop, setitem)
from dfc.compiler.autograph.strings import format_string, format_value
from dfc.compiler.autograph.special_values import (Undefined, UndefinedReturnValue, deleted,
                                                   is_undefined, ld, retval, unset)

__all__ = [
    "converted_call", "if_exp", "if_stmt", "and_", "not_", "or_", "for_stmt", "while_stmt",
    "assert_stmt", "ld_or_undefined", "list_append", "list_extend", "list_pop", "setitem",
    "delitem", "format_string", "format_value", "Undefined", "UndefinedReturnValue",
    "is_undefined", "ld", "retval",
    "not_tensor_in_try", "compare_chain", "deleted", "unset", "finally_exit",
]
