"""A DfcError leaving dfc's public entry points shows the user's frames, not dfc's (as JAX hides its
own); DFC_TRACEBACK=full and the CLI's --debug show every frame; errors name the user's file:line."""
import os
import traceback

import numpy as np
import pytest
from click.testing import CliRunner

import dfc
from dfc import config
from dfc.cli import main
from dfc.errors import DfcError, DfcInputError, DfcTypeError

DFC_DIR = os.path.dirname(os.path.abspath(dfc.__file__)) + os.sep
BOUNDARY = os.path.join(DFC_DIR, "traceback_filter.py")
HERE = os.path.basename(__file__)


def dfc_frames(e):
    """The files of dfc's own frames in e's traceback, the entry points' boundary apart."""
    files = [f.filename for f in traceback.extract_tb(e.__traceback__)]
    return [f for f in files if f.startswith(DFC_DIR) and f != BOUNDARY]


@pytest.fixture
def full_tracebacks():
    before = config.traceback_mode()
    config.set_traceback("full")
    yield
    config.set_traceback(before)


@dfc.function
def mismatch(x, y):
    z = x * 2
    return dfc.matmul(z, y)  # MARK: shapes


def _mismatch_error():
    with pytest.raises(DfcTypeError) as info:
        mismatch(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    return info.value


def test_a_shape_mismatch_shows_the_users_frames_only():
    e = _mismatch_error()
    assert dfc_frames(e) == []
    files = [f.filename for f in traceback.extract_tb(e.__traceback__)]
    assert files[0].endswith(HERE)                         # the call in this file
    assert any(f.startswith("<dfc:") for f in files)       # the converted function's frame
    assert f"{HERE}:" in str(e) and "MatMul shapes" in str(e)
    text = "".join(traceback.format_exception(e))
    assert "DFC_TRACEBACK=full" in text                    # says how to see the rest


def test_dfc_traceback_full_shows_every_frame(full_tracebacks):
    e = _mismatch_error()
    assert any(f.endswith(os.path.join("compiler", "tracing.py")) for f in dfc_frames(e))


def test_the_environment_variable_is_read_in_config(monkeypatch):
    monkeypatch.setenv("DFC_TRACEBACK", "Full")
    assert config._env_traceback() == "full"
    monkeypatch.setenv("DFC_TRACEBACK", "")
    assert config._env_traceback() == "filtered"
    monkeypatch.setenv("DFC_TRACEBACK", "short")
    with pytest.raises(DfcError, match="DFC_TRACEBACK='short'"):
        config._env_traceback()
    with pytest.raises(DfcError, match="set_traceback"):
        config.set_traceback("all")


def test_graph_calls_trace_and_gradients_are_boundaries_too():
    g = dfc.trace(lambda x: x + 1, dfc.TensorSpec([2], "float32"))
    with pytest.raises(DfcInputError) as info:
        g()                                                # a missing input: Session.call
    assert dfc_frames(info.value) == []
    with pytest.raises(DfcError) as info:
        dfc.Session(g).run("nosuchnode:0")
    assert dfc_frames(info.value) == []

    def bad_grad(x):
        return dfc.gradients(x, [3])
    with pytest.raises(DfcTypeError) as info:
        dfc.trace(bad_grad, dfc.TensorSpec([2], "float32"))
    assert dfc_frames(info.value) == []


def test_an_inner_function_error_is_filtered_once_at_the_outer_call():
    @dfc.function
    def inner(x):
        return dfc.reshape(x, [7])

    @dfc.function
    def outer(x):
        return inner(x) + 1

    with pytest.raises(DfcError) as info:
        outer(np.ones(3, np.float32))
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert dfc_frames(info.value) == [] and files.count(BOUNDARY) == 1


def test_concat_gradient_error_names_the_users_line():
    def f(x, s):
        y = dfc.reshape(x, s)                                 # rank known only when the graph runs
        z = dfc.concat([y, y], axis=0)  # MARK: concat
        return dfc.gradients(dfc.reduce_sum(z), [x])

    line = next(i for i, text in enumerate(open(__file__), 1) if "# MARK: concat" in text)
    with pytest.raises(DfcError, match="gradient of concat") as info:
        dfc.trace(f, dfc.TensorSpec([6], "float32"), dfc.TensorSpec([None], "int64"))
    assert info.value.loc == f"{__file__}:{line}"
    assert dfc_frames(info.value) == []


def test_cli_debug_keeps_every_frame(tmp_path):
    dfc.save(dfc.trace(lambda x: x * 2, dfc.TensorSpec([2], "float32")), str(tmp_path / "g.json"))
    args = ["run", str(tmp_path / "g.json"), "-i", "x=[1, 2, 3]"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "Traceback" not in r.stderr and "x" in r.stderr
    r = CliRunner().invoke(main, ["--debug"] + args)
    assert isinstance(r.exception, DfcError), r.exc_info
    assert dfc_frames(r.exception)
    assert config.traceback_mode() == "filtered"           # --debug lasts for its command only
