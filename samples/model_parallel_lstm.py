"""Model parallelism (Figure 15 of the dynamic-control-flow paper): a stacked LSTM with each layer on its
own task, pipelined by parallel iterations.

One while loop runs over time; layer k's cell runs on device DEVICES[k] (a Ray task of a cluster, or a
device of this process). With parallel_iterations > 1 the runtime runs layer k of step t while layer k-1
already works on step t+1, so the layers form a pipeline across tasks; the gradient loop runs the same
pipeline backwards, each layer's gradient ops on its layer's task (gradients follow their forward ops).
The graph is pure (weights in, loss and gradients out), so every placement computes bit-identical values.

    python samples/model_parallel_lstm.py                 # layers on devices cpu:0..L-1 of this process
    python samples/model_parallel_lstm.py --cluster       # layers on Ray tasks worker:0..L-1 (dfc[cluster])
    python -m benchmarks.model_parallel                   # the speed-ups (benchmarks/results/model_parallel.md)
"""
import argparse
import time

import numpy as np

import dfc

LAYERS, H, B, T = 2, 64, 16, 20
DEVICES = [f"worker:{k}/cpu:0" for k in range(LAYERS)]


def cell(x, h, c, W, b):
    z = dfc.matmul(dfc.concat([x, h], 1), W) + b
    zi, zf, zo, zg = dfc.split(z, 4, axis=1)
    c = dfc.sigmoid(zf) * c + dfc.sigmoid(zi) * dfc.tanh(zg)
    return dfc.sigmoid(zo) * dfc.tanh(c), c


def lstm_stack(xs, params, devices=DEVICES):
    """The last layer's output at every step, summed over the sequence; params: [W0, b0, W1, b1, ...]."""
    n, layers = dfc.shape(xs)[0], len(params) // 2
    zeros = dfc.zeros_like(xs[0])          # [batch, hidden]: the input width is the hidden width

    def body(t, acc, *state):
        inp, new = xs[t], []
        for k in range(layers):
            with dfc.device(devices[k]):
                h, c = cell(inp, state[2 * k], state[2 * k + 1], params[2 * k], params[2 * k + 1])
            new += [h, c]
            inp = h
        return (t + 1, acc + inp) + tuple(new)
    out = dfc.while_loop(lambda t, acc, *s: t < n, body, (0, zeros) + (zeros,) * (2 * layers),
                         parallel_iterations=32)
    return out[1]


def _specs(layers, H, B):
    return [dfc.TensorSpec([None, B, H], "float32"), dfc.TensorSpec([B, H], "float32")] + \
        [dfc.TensorSpec(s, "float32") for _ in range(layers) for s in ([2 * H, 4 * H], [4 * H])]


def build(layers=LAYERS, devices=None, H=H, B=B):
    """(train_step, predict) graphs: train_step(xs, target, *params) -> (loss, *gradients);
    predict(xs, target, *params) -> the summed output."""
    devices = devices or [f"worker:{k}/cpu:0" for k in range(layers)]

    def train_step(xs, target, *params):
        loss = dfc.reduce_mean((lstm_stack(xs, params, devices) - target) ** 2)
        return (loss,) + tuple(dfc.gradients(loss, list(params)))

    def predict(xs, target, *params):
        return lstm_stack(xs, params, devices)
    return dfc.trace(train_step, *_specs(layers, H, B)), dfc.trace(predict, *_specs(layers, H, B))


def inputs(layers=LAYERS, seed=0, H=H, B=B, T=T):
    rng = np.random.default_rng(seed)
    params = []
    for _ in range(layers):
        params += [(rng.normal(size=(2 * H, 4 * H)) / np.sqrt(2 * H)).astype(np.float32),
                   np.zeros(4 * H, np.float32)]
    xs = rng.normal(size=(T, B, H)).astype(np.float32)
    return [xs, rng.normal(size=(B, H)).astype(np.float32)] + params


def one_process(layers):
    """The device map that runs every layer on this process's cpu:0 (the definition to compare with)."""
    return {f"worker:{k}/cpu:0": "cpu:0" for k in range(layers)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--cluster", action="store_true", help="put the layers on Ray tasks (default: devices)")
    a = p.parse_args(argv)
    train, predict = build(a.layers)
    args = inputs(a.layers)
    if a.cluster:
        cluster = dfc.cluster.connect(tasks={"worker": a.layers}, log_to_driver=False)
        kw, where = {"cluster": cluster}, f"{a.layers} Ray tasks"
    else:
        cluster, kw = None, {"device_map": {f"worker:{k}/cpu:0": f"cpu:{k}" for k in range(a.layers)}}
        where = f"{a.layers} devices of this process"
    try:
        s, ref = dfc.Session(train, **kw), dfc.Session(train, device_map=one_process(a.layers))
        got, want = s.call(*args), ref.call(*args)
        same = all(np.array_equal(g, w) for g, w in zip(got, want))
        print(f"train step on {where}: loss {float(got[0]):.6f}; bit-identical to one device: {same}")
        t0 = time.perf_counter()
        for _ in range(a.steps):            # plain SGD on the gradients the pipelined step returns
            loss, *grads = s.call(*args)
            args = args[:2] + [w - 0.5 * g for w, g in zip(args[2:], grads)]
        dt = (time.perf_counter() - t0) / a.steps
        print(f"{a.steps} SGD steps: loss {float(loss):.6f}, {dt * 1e3:.1f} ms a step")
        out = dfc.Session(predict, **kw).call(*args)
        print(f"inference on {where}: output norm {float(np.linalg.norm(out)):.4f}; bit-identical: "
              f"{np.array_equal(out, dfc.Session(predict, device_map=one_process(a.layers)).call(*args))}")
    finally:
        if cluster is not None:
            cluster.shutdown()


if __name__ == "__main__":
    main()
