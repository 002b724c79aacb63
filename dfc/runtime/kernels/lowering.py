"""The lowering table: op name -> how a compiled loop frame computes the op (dfc/runtime/compiled/).

A lowering sits next to its op's kernel (math_lower.py beside math_kernels.py, ...) and is registered like
a kernel: `@lowering("Add", "Sub")` on `fn(e) -> list of output expressions`. `e` (compiled.codegen.Emit)
gives the node, its input expressions `e.args` and static types `e.ins` / `e.outs` (`.dtype`, `.ndim`),
and emits numba-compatible statements (`e.stmt(template, *parts)`). Expressions and statements are
emit.Code (dfc/runtime/emit.py): constant templates filled with the emitter's identifiers, literals of
validated numbers and dtype names, never text from the graph; an op -> template table is a module-level
dict of string constants (tests/runtime/test_codegen_sources.py reads the lowerings and checks both).
A rank-0 tensor is a numpy scalar of its dtype in compiled code, any other a C-contiguous array; every
result must have exactly the dtype and rank of the op's kernel result (numba promotes scalars differently
from numpy, so lowerings cast explicitly) and exactly its bits (where numba's own math differs, `e.loop` calls numpy's inner loop: dfc/runtime/compiled/npcall.py;
where nothing in numba can give the kernel's results, `e.kernel_call` calls the kernel itself in numba's
object mode).
Elementwise ops also say how one element is computed inside a fused elementwise loop
(math_lower.elementwise; dfc/runtime/compiled/fusion.py): by their own rank-0 lowering, or by numpy's loop
over a whole buffer.

A lowering that cannot handle a node (its attrs or input types) raises Unsupported; an op without a
lowering, or a node whose lowering refuses, keeps its frame on the fused Python path, and
`Session.compiled_frames()` / `dfc show --fused` say which node blocked compilation and why. Every op
has a lowering except those in codegen.NOT_LOWERED, each with its reason (asynchronous, cross-device, host
effects); tests/compiler/test_lowering_coverage.py keeps it so.
"""
from dfc.runtime import emit as E

LOWERINGS = {}


class Unsupported(Exception):
    """This node cannot be compiled (the message says why)."""


def lowering(*names):
    """Register fn(e) -> [output expression, ...] as the lowering of each op name."""
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


def scalar_type(dtype):
    """The numba-visible constructor of a dtype's scalars in generated code (np.float32, np.bool_, ...)."""
    return E.fmt("np.bool_") if dtype == "bool" else E.fmt("np.{}", E.dtype(dtype))
