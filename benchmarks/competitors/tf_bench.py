"""TensorFlow side of the benchmarks (competitors' venv). argv[1]: JSON config; prints JSON."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from lstm_problem import make_inputs  # noqa: E402
from bench_util import median_time as timed, run_task  # noqa: E402


def loop(n, reps):
    @tf.function
    def f(n):
        return tf.while_loop(lambda i: i < n, lambda i: i + 1, [tf.constant(0)])

    @tf.function
    def step(i):
        return i + 1
    in_graph = n / timed(lambda: f(tf.constant(n)), reps)
    k = min(n, 3000)

    def out():
        i = tf.constant(0)
        while int(i) < k:
            i = step(i)
    return {"iterations_per_s": in_graph, "out_of_graph_iterations_per_s": k / timed(out, reps)}


def lstm(H, B, T, reps, grads_out):
    x, W, b = make_inputs(H, B, T)
    x, Wv, bv = tf.constant(x), tf.Variable(W), tf.Variable(b)

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            def body(t, h, c, acc):
                z = tf.concat([x[t], h], 1) @ Wv + bv
                i, f, o = (tf.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))
                g = tf.tanh(z[:, 3 * H:])
                c = f * c + i * g
                h = o * tf.tanh(c)
                return t + 1, h, c, acc + tf.reduce_sum(h)
            z0 = tf.zeros((B, H))
            _, h, c, acc = tf.while_loop(lambda t, *_: t < T, body, [tf.constant(0), z0, z0, tf.constant(0.0)])
            loss = acc + tf.reduce_sum(h * h)
        return loss, tape.gradient(loss, [Wv, bv])
    loss, (dW, db) = train_step(x)
    np.savez(grads_out, dW=dW.numpy(), db=db.numpy())
    return {"ms_per_step": timed(lambda: [v.numpy() for v in train_step(x)[1]], reps) * 1e3}


if __name__ == "__main__":
    run_task(loop, lstm)
