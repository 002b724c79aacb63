"""Variables live in resource containers (whitepaper §4.7): one value per shared name, seen by every
dfc.function, trace, retrace, Session and loaded graph of the process."""
import threading

import numpy as np
import pytest

import dfc


def test_two_functions_share_a_variable():
    w = dfc.Variable(np.float64(1.0), name="w")

    @dfc.function
    def train(x):
        w.assign(w.read_value() + x)
        return w.read_value()

    @dfc.function
    def predict(x):
        return w.read_value() * x

    assert float(train(np.float64(4.0))) == 5.0
    assert float(predict(np.float64(1.0))) == 5.0          # was 1.0: each graph had its own copy
    assert float(w.numpy()) == 5.0


def test_a_retrace_and_a_loaded_graph_see_the_same_value(tmp_path):
    w = dfc.Variable(np.float64(2.0), name="w")

    @dfc.function
    def scale(x):
        w.assign_add(np.float64(1.0))
        return w.read_value() * x

    assert float(scale(np.float64(1.0))) == 3.0
    assert float(scale(np.float32(1.0))) == 4.0             # new input dtype: a second trace, same Variable
    g = scale.trace(dfc.TensorSpec([], "float64"))
    dfc.save(g, str(tmp_path / "scale.json"))
    loaded = dfc.load(str(tmp_path / "scale.json"))
    assert float(loaded(np.float64(1.0))) == 5.0            # bound to the same store by shared name
    assert float(w.numpy()) == 5.0


def test_numpy_and_assign_outside_any_graph():
    v = dfc.Variable(np.zeros(3), name="weights")
    np.testing.assert_array_equal(v.numpy(), [0, 0, 0])
    v.assign(np.ones(3))
    np.testing.assert_array_equal(np.asarray(v), [1, 1, 1])
    v.assign_add(np.arange(3.0))
    v.assign_sub(np.float64(1.0) * np.ones(3))
    np.testing.assert_array_equal(v.numpy(), [0, 1, 2])
    v.assign([1, 2, 3])                                      # int data fits float64 exactly
    np.testing.assert_array_equal(v.read_value(), [1, 2, 3])   # read_value outside a graph: numpy

    @dfc.function
    def total():
        return dfc.reduce_sum(v.read_value())
    assert float(total()) == 6.0                             # the graph sees what Python set

    with pytest.raises(dfc.DfcError, match="shape") as e:
        v.assign(np.ones(4))
    assert "test_containers.py" in str(e.value)
    c = dfc.Variable(np.int32(0), name="count")
    with pytest.raises(dfc.DfcError, match="would change the values"):
        c.assign(np.float64(0.5))


def test_values_given_out_cannot_change_the_variable():
    v = dfc.Variable(np.zeros(2), name="v")

    @dfc.function
    def read():
        return v.read_value()

    out = read()
    out += 1                                                 # the caller owns what it got
    got = v.numpy()
    got += 1
    mine = np.ones(2)
    v.assign(mine)
    mine += 1                                                # assign copied the caller's array
    np.testing.assert_array_equal(v.numpy(), [1, 1])
    np.testing.assert_array_equal(read(), [1, 1])
    assert mine.flags.writeable


def test_named_containers_list_and_reset():
    v = dfc.Variable(np.int64(0), name="steps", container="test_named")

    @dfc.function
    def step():
        v.assign_add(np.int64(1))
        return v.read_value()

    step()
    step()
    assert "test_named" in dfc.containers.names()
    assert v.shared_name in dfc.containers.get("test_named").names()
    assert int(v.numpy()) == 2
    dfc.containers.reset("test_named")
    assert int(v.numpy()) == 0                               # back to its initial value
    assert int(step()) == 1
    with pytest.raises(dfc.DfcError, match="no container named"):
        dfc.containers.reset("no such container")


def test_default_container_reset_restarts_every_variable():
    v = dfc.Variable(np.float32(3.0), name="r")
    v.assign(np.float32(7.0))
    dfc.containers.reset()
    assert float(v.numpy()) == 3.0


def test_shared_names_are_unique_unless_asked():
    a, b = dfc.Variable(1.0, name="dup"), dfc.Variable(2.0, name="dup")
    assert a.shared_name != b.shared_name
    c = dfc.Variable(1.0, name="other", shared_name=a.shared_name)     # one store, two Python objects
    c.assign(5.0)
    assert float(a.numpy()) == 5.0 and float(b.numpy()) == 2.0


def test_a_graph_declaring_another_shape_is_refused():
    old = dfc.Variable(np.zeros(2), name="reshaped", container="test_mismatch")
    g = dfc.trace(lambda: old.read_value())
    dfc.containers.reset("test_mismatch")
    dfc.Variable(np.zeros(3), name="new", shared_name=old.shared_name, container="test_mismatch")
    with pytest.raises(dfc.DfcError, match=r"holds float64\[3\], but this graph declares it float64\[2\]") as e:
        g()
    assert e.value.node is not None
    with pytest.raises(dfc.DfcError, match="holds float64") as e:
        dfc.Variable(np.zeros(4), name="clash", shared_name=old.shared_name, container="test_mismatch")
    assert "test_containers.py" in str(e.value)
    dfc.containers.reset("test_mismatch")


def test_eight_threads_first_call_apply_every_update_once():
    counter = dfc.Variable(np.int64(0), name="hits")

    @dfc.function
    def hit(x):
        counter.assign(counter.read_value() + x)           # read-modify-write: needs one session, one trace
        return counter.read_value()

    barrier = threading.Barrier(8)
    errors = []

    def worker():
        try:
            barrier.wait()
            hit(np.int64(1))
        except Exception as e:   # noqa: BLE001 — reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert int(counter.numpy()) == 8
    assert len(hit._cache) == 1                             # traced once


def test_concurrent_assign_add_from_many_sessions_is_atomic():
    total = dfc.Variable(np.int64(0), name="total")
    g = dfc.trace(lambda x: total.assign_add(x), dfc.TensorSpec([], "int64"))
    sessions = [dfc.Session(g) for _ in range(4)]           # separate sessions run concurrently

    def worker(s):
        for _ in range(50):
            s.call(np.int64(1))

    threads = [threading.Thread(target=worker, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(total.numpy()) == 200


def test_checkpoint_saves_whichever_function_last_touched_the_values(tmp_path):
    w = dfc.Variable(np.zeros(2), name="w")
    ckpt = dfc.Checkpoint({"w": w})
    path = str(tmp_path / "model.npz")

    @dfc.function
    def train():
        w.assign_add(np.ones(2))
        return w.read_value()

    @dfc.function
    def save():
        ckpt.save(path)
        return w.read_value()

    train()
    train()
    save()                                                   # another function saves what train left
    with np.load(path) as z:
        np.testing.assert_array_equal(z["w"], [2, 2])
    w.assign(np.zeros(2))
    ckpt.restore(path)                                       # outside a graph: eager restore
    np.testing.assert_array_equal(w.numpy(), [2, 2])
    w.assign(np.full(2, 9.0))
    ckpt.save(str(tmp_path / "eager.npz"))                   # outside a graph: eager save
    with np.load(tmp_path / "eager.npz") as z:
        np.testing.assert_array_equal(z["w"], [9, 9])


def test_variables_made_inside_a_function_on_its_first_trace_keep_state_like_tf():
    @dfc.function
    def count(x):
        v = dfc.Variable(np.float32(0.0), name="made_inside")
        v.assign_add(x)
        return v.read_value()

    assert float(count(np.float32(1.0))) == 1.0
    assert float(count(np.float32(1.0))) == 2.0             # one Variable, made on the first trace
    with pytest.raises(dfc.DfcError, match="creates a dfc.Variable on a retrace") as e:
        count(np.float64(1.0))                               # a retrace would make a second, fresh one
    assert "test_containers.py" in str(e.value)


class _DeviceArray(np.ndarray):
    """Stands in for a cupy array: marked as device memory, copied to the host by get()."""
    __cuda_array_interface__ = {}

    def get(self):
        return np.array(self.view(np.ndarray))


def test_a_variable_moves_to_the_memory_of_the_device_that_uses_it():
    from types import SimpleNamespace
    from dfc.runtime.containers import VariableResource
    gpu = SimpleNamespace(asarray=lambda v: np.array(v).view(_DeviceArray))
    r = VariableResource("w", np.ones(2))
    assert type(r.place(gpu).read()) is _DeviceArray          # a graph on the GPU: the value goes there
    assert type(r.place(gpu).read()) is _DeviceArray          # and stays there while the GPU uses it
    host = r.place(np).read()                                  # a graph on the CPU: back to host memory
    assert type(host) is np.ndarray and not host.flags.writeable
    np.testing.assert_array_equal(host, [1, 1])


def test_kernels_read_shapes_and_indices_from_device_arrays_explicitly():
    from dfc.runtime.kernels import kernel_for
    from dfc.runtime.kernels.registry import host
    from dfc.ir.graph import Node
    gets = []

    class Tracked(_DeviceArray):
        def get(self):
            gets.append(1)
            return super().get()

    shape = np.array([2, 3]).view(Tracked)
    assert type(host(shape)) is np.ndarray and gets == [1]        # copied with get(), as cupy requires
    reshape = kernel_for(Node("r", "Reshape", ["x", "s"], {}), np)
    assert reshape(None, (np.arange(6.0), shape))[0].shape == (2, 3) and gets == [1, 1]
