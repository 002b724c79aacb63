"""JAX side of the benchmarks (run in the competitors' venv). argv[1]: JSON config; prints JSON."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from lstm_problem import make_inputs  # noqa: E402
from bench_util import median_time as timed, run_task  # noqa: E402


def loop(n, reps):
    f = jax.jit(lambda n: jax.lax.while_loop(lambda i: i < n, lambda i: i + 1, 0))
    return {"iterations_per_s": n / timed(lambda: f(n).block_until_ready(), reps)}


def lstm_value_and_grad(H, B):
    """jit(value_and_grad) of the LSTM loss: f(W, b, x) -> (loss, (dW, db))."""
    def loss_fn(W, b, x):
        def step(carry, xt):
            h, c = carry
            z = jnp.concatenate([xt, h], 1) @ W + b
            i, f, o = (jax.nn.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))
            g = jnp.tanh(z[:, 3 * H:])
            c = f * c + i * g
            h = o * jnp.tanh(c)
            return (h, c), h.sum()
        (h, c), sums = jax.lax.scan(step, (jnp.zeros((B, H)), jnp.zeros((B, H))), x)
        return sums.sum() + (h * h).sum()
    return jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))


def lstm(H, B, T, reps, grads_out):
    x, W, b = make_inputs(H, B, T)
    g = lstm_value_and_grad(H, B)
    loss, (dW, db) = g(W, b, x)
    np.savez(grads_out, dW=np.asarray(dW), db=np.asarray(db))
    t = timed(lambda: jax.block_until_ready(g(W, b, x)), reps)
    return {"ms_per_step": t * 1e3}


if __name__ == "__main__":
    run_task(loop, lstm)
