"""A Variable last updated by a graph on one device (strict:1) is read by a graph on another (strict:0):
its value moves to the reading run's device (it stayed on strict:1, and the read failed)."""
import numpy as np

import dfc


def test_a_variable_moves_to_the_device_of_the_graph_that_reads_it():
    v = dfc.Variable(np.ones((4, 2), np.float32), name="moved")

    def update():
        with dfc.device("strict:1"):
            return v.assign_add(np.ones((4, 2), np.float32))

    def read(i):
        with dfc.device("strict:0"):
            return dfc.gather(v.read_value(), i)
    dfc.run(dfc.trace(update))
    got = dfc.run(dfc.trace(read, dfc.TensorSpec([None], "int64")), np.array([1, 3]))
    np.testing.assert_array_equal(got, np.full((2, 2), 2.0, np.float32))
    np.testing.assert_array_equal(v.numpy(), np.full((4, 2), 2.0, np.float32))
