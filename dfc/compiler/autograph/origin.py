"""Source maps from generated code back to the user's file:line.

Every node of a parsed user function gets an `_dfc_origin` attribute
(filename, lineno). Nodes made from templates inherit the origin of the
statement they replace. After unparsing, the generated source is parsed again
and walked in step with the converted tree, so each generated line maps to the
user line it came from. The map is registered in
`dfc.compiler.tracing.SOURCE_MAPS` (read by the tracer to locate nodes) and
the generated source in `linecache` (so tracebacks show it).
"""
import itertools
import linecache
import os
import sys

import gast

from dfc.compiler import tracing

_counter = itertools.count(1)


def source_maps():
    """The shared filename -> {generated line: (file, line)} table."""
    return tracing.SOURCE_MAPS


def generated_filename(fn_module, qualname):
    return f"<dfc:{fn_module}.{qualname}#{next(_counter)}>"


def user_function_name(filename):
    """The name of the user function whose converted code is in generated file `filename`."""
    if not filename.startswith("<dfc:"):
        return None
    qualname = filename[len("<dfc:"):].rpartition("#")[0]
    return qualname.rpartition(".")[2] or None


def set_origin(node, filename, lineno):
    node._dfc_origin = (filename, lineno)


def get_origin(node):
    return getattr(node, "_dfc_origin", None)


def annotate_user_tree(tree, filename, line_offset):
    """Record the user's file:line on every node that has a line number."""
    for node in gast.walk(tree):
        lineno = getattr(node, "lineno", None)
        if lineno is not None:
            set_origin(node, filename, lineno + line_offset)


def copy_origin(nodes, origin):
    """Give `origin` to every node under `nodes` that has none."""
    if origin is None:
        return
    if not isinstance(nodes, (list, tuple)):
        nodes = [nodes]
    for root in nodes:
        for node in gast.walk(root):
            if get_origin(node) is None:
                node._dfc_origin = origin


def build_line_map(converted_tree, reparsed_tree, num_lines):
    """Map each generated line to the user origin of the code on it."""
    found = {}
    for old, new in zip(gast.walk(converted_tree), gast.walk(reparsed_tree)):
        if type(old) is not type(new):
            break
        origin = get_origin(old)
        lineno = getattr(new, "lineno", None)
        if origin is not None and lineno is not None:
            found.setdefault(lineno, origin)
    line_map, last = {}, None
    for lineno in range(1, num_lines + 1):
        last = found.get(lineno, last)
        if last is not None:
            line_map[lineno] = last
    return line_map


def register(filename, source, line_map):
    source_maps()[filename] = line_map
    lines = source.splitlines(True)
    linecache.cache[filename] = (len(source), None, lines, filename)


def format_loc(origin):
    if origin is None:
        return None
    filename, lineno = origin
    return f"{os.path.basename(filename)}:{lineno}"


def map_frame(filename, lineno):
    """(file, line) of a frame, mapped through the source maps when generated."""
    line_map = source_maps().get(filename)
    if line_map is None:
        return None
    return line_map.get(lineno)


def user_location(skip_dfc=True):
    """The innermost user (or generated, mapped) frame on the stack as 'file.py:N'."""
    return format_loc(user_frame(skip_dfc, sys._getframe(1)))


def user_frame(skip_dfc=True, frame=None):
    """(file, line) of the innermost user (or generated, mapped) frame on the stack."""
    frame = frame or sys._getframe(1)
    dfc_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    while frame is not None:
        code = frame.f_code
        mapped = map_frame(code.co_filename, frame.f_lineno)
        if mapped is not None:
            return mapped
        fname = code.co_filename
        if not (skip_dfc and os.path.abspath(fname).startswith(dfc_dir + os.sep)) and not fname.startswith("<"):
            return (fname, frame.f_lineno)
        frame = frame.f_back
    return None


def traceback_origin(tb):
    """(file, line) of the innermost frame of a traceback in generated code, mapped back."""
    found = None
    while tb is not None:
        mapped = map_frame(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        if mapped is not None:
            found = mapped
        tb = tb.tb_next
    return found


def generated_caller_location(depth=2):
    """The mapped location of the nearest generated frame above the caller."""
    return format_loc(generated_caller_origin(depth + 1))


def generated_caller_origin(depth=2):
    """(file, line) of the nearest generated frame above the caller, mapped back."""
    frame = sys._getframe(depth)
    while frame is not None:
        mapped = map_frame(frame.f_code.co_filename, frame.f_lineno)
        if mapped is not None:
            return mapped
        frame = frame.f_back
    return None
