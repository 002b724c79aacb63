"""Mixture of experts: a gate picks one expert per example with in-graph conditionals; experts on their own devices.

    gates = softmax(x @ Wg);  k = argmax(gates);  y = gates[k] * expert_k(x)      (top-1 gating, as in
                                                                                  the Switch Transformer)

Each example goes through a `for` loop over the batch whose body is an
`if/elif` on the chosen expert, so only that expert runs for it (a cond per
example, §4.2: the untaken branches get dead tensors and do no work). Expert k
lives on device cpu:k+1 -- its weights, its computation and its updates; the
gate stays on cpu:0, and the runtime partitions the graph with Send/Recv.
Training backpropagates through the conds inside the loop; the gate learns
through the gate value that scales the chosen expert's output.

    python samples/moe.py [--steps 30]
    dfc compile samples/moe.py -o out               # -> out/train.json, out/predict.json
    dfc run out/predict.json --input "xs=[[0.5,0.5],[-0.5,0.5]]" --json
"""
import argparse

import numpy as np

import dfc

D, HID, EXPERTS = 2, 8, 4
DEVICES = [f"cpu:{k + 1}" for k in range(EXPERTS)]
rng = np.random.default_rng(0)
Wg = dfc.Variable(rng.normal(size=(D, EXPERTS)) * 1.0, name="Wg")
EXPERT_PARAMS = [[dfc.Variable(rng.normal(size=(D, HID)), name=f"W1_{k}"),
                  dfc.Variable(rng.normal(size=(HID,)) * 0.5, name=f"b1_{k}"),
                  dfc.Variable(rng.normal(size=(HID, 1)) * 0.3, name=f"W2_{k}")] for k in range(EXPERTS)]
opt = dfc.train.Momentum(0.05, 0.9)     # no global step count (unlike Adam), so each device updates on its own


def expert(k, x):
    """Expert k (a one-hidden-layer MLP) on its own device."""
    W1, b1, W2 = EXPERT_PARAMS[k]
    with dfc.device(DEVICES[k]):
        return (dfc.tanh(x @ W1.read_value() + b1.read_value()) @ W2.read_value())[0, 0]


def moe(xs):
    """The layer's output per example, and which expert each example went to."""
    with dfc.device("cpu:0"):
        gates = dfc.softmax(xs @ Wg.read_value())
        choice = dfc.argmax(gates, axis=1)
    out = dfc.TensorArray("float64")
    for i in range(dfc.shape(xs)[0]):
        x, k = xs[i:i + 1], choice[i]
        if k == 0:                      # one cond per example: only the chosen expert runs
            y = expert(0, x)
        elif k == 1:
            y = expert(1, x)
        elif k == 2:
            y = expert(2, x)
        else:
            y = expert(3, x)
        out = out.write(i, gates[i, k] * y)
    return out.stack(), choice


def loss_fn(xs, ys):
    pred, choice = moe(xs)
    return dfc.reduce_mean(dfc.square(pred - ys)), choice


@dfc.function(input_signature=[dfc.TensorSpec([None, D], "float64"), dfc.TensorSpec([None], "float64"),
                               dfc.TensorSpec([], "int64")])
def train(xs, ys, steps):
    """`steps` momentum steps in one graph; returns the loss before each step and the final expert usage."""
    losses = dfc.TensorArray("float64")
    usage = dfc.zeros([EXPERTS], "float64")
    for s in range(steps):
        loss, choice = loss_fn(xs, ys)
        # Each device updates its own variables. (The gradients are reshaped to the variables' shapes:
        # with an unknown batch size their static shapes are partly unknown and Variable.assign rejects
        # them -- a dfc bug, reported.)
        groups = [("cpu:0", [Wg])] + list(zip(DEVICES, EXPERT_PARAMS))
        all_vars = [v for _, vs in groups for v in vs]
        grads = dict(zip([v.name for v in all_vars], dfc.gradients(loss, all_vars)))
        for device, variables in groups:
            with dfc.device(device):
                opt.apply_gradients([(dfc.reshape(grads[v.name], v.shape), v) for v in variables])
        losses = losses.write(s, loss)
        usage = dfc.reduce_sum(dfc.one_hot(choice, EXPERTS, dtype="float64"), axis=0)
    return losses.stack(), usage


@dfc.function(input_signature=[dfc.TensorSpec([None, D], "float64")])
def predict(xs):
    """The layer's output per example and the expert each example was routed to."""
    return moe(xs)


def moe_numpy(xs, wg, experts):
    """The same forward pass in numpy (the reference)."""
    z = xs @ wg
    gates = np.exp(z - z.max(1, keepdims=True))
    gates /= gates.sum(1, keepdims=True)
    choice = gates.argmax(1)
    ys = [gates[i, k] * (np.tanh(x @ experts[k][0] + experts[k][1]) @ experts[k][2])[0]
          for i, (x, k) in enumerate(zip(xs, choice))]
    return np.array(ys), choice


def make_batch(batch=16, seed=1):
    """A target with a different shape in each half-plane, so that experts pay off."""
    r = np.random.default_rng(seed)
    xs = r.uniform(-1, 1, size=(batch, D))
    ys = np.where(xs[:, 1] > 0, np.sin(3 * xs[:, 0]), np.abs(xs[:, 0]) - 0.5)
    return xs, ys


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)
    xs, ys = make_batch()
    pred, choice = predict(xs)
    ref, ref_choice = moe_numpy(xs, Wg.initial_value, [[v.initial_value for v in e] for e in EXPERT_PARAMS])
    assert np.allclose(pred, ref) and np.array_equal(choice, ref_choice)
    graph = train.trace(*train.input_signature)
    devices = sorted({n.device for n in graph.nodes.values() if n.device})
    print(f"forward matches numpy; the training graph has {graph.num_nodes()} nodes on devices {devices}")
    losses, usage = train(xs, ys, np.int64(args.steps))
    print(f"momentum, {args.steps} in-graph steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
          f"examples per expert at the end {usage.astype(int).tolist()}")
    return losses, usage


if __name__ == "__main__":
    main()
