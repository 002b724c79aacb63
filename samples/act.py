"""Adaptive Computation Time (Graves, 2016): an RNN that decides how long to think at each step.

At every time step the cell runs a nested, data-dependent `while` loop of
"ponder" steps: each step updates the state and emits a halting probability
p_n; the loop stops once the cumulative probability reaches 1 - EPS (or after
MAX_PONDER steps). The step's state is the p-weighted mean of the ponder
states (the last one gets the remainder R = 1 - sum of the earlier p_n), and
the ponder cost N + R is added to the loss. Each example of the batch halts
on its own: the inner loop runs while any example is still pondering.

Training differentiates through both loops (time, and ponder steps inside it)
with every Adam step inside one more in-graph loop.

    python samples/act.py [--steps 40]
    dfc compile samples/act.py -o out               # -> out/train.json, out/predict.json
    dfc run out/predict.json --input xs=@xs.npy --json
"""
import argparse

import numpy as np

import dfc

D, H = 2, 8                 # input features, hidden units
MAX_PONDER, EPS = 5, 0.01
PONDER_COST = 0.01          # tau: the price of one more ponder step
rng = np.random.default_rng(0)
Wx = dfc.Variable(rng.normal(size=(D, H)) * 0.5, name="Wx")
Ws = dfc.Variable(rng.normal(size=(H, H)) * 0.5 / np.sqrt(H), name="Ws")
wf = dfc.Variable(rng.normal(size=(H,)) * 0.5, name="wf")          # input weight of the "first ponder step" flag
bs = dfc.Variable(np.zeros(H), name="bs")
wp = dfc.Variable(rng.normal(size=(H,)) * 0.5, name="wp")          # halting unit
bp = dfc.Variable(np.float64(-1.0), name="bp")                     # start by pondering a few steps
Wo = dfc.Variable(rng.normal(size=(H,)) * 0.5, name="Wo")
PARAMS = [Wx, Ws, wf, bs, wp, bp, Wo]
opt = dfc.train.Adam(0.03)


def ponder(x, s, w):
    """One ACT step: ponder on input x from state s; returns (new state, ponder cost N + R) per example."""
    batch = dfc.shape(x)[0]
    running = dfc.ones([batch], "bool")
    halt_sum = dfc.zeros([batch], "float64")        # sum of p_n of the steps before halting
    new_state = dfc.zeros([batch, H], "float64")
    cost = dfc.zeros([batch], "float64")
    n = 0
    while n < MAX_PONDER and dfc.reduce_any(running):    # the nested, data-dependent loop
        first = dfc.cast(n == 0, "float64")
        s = dfc.tanh(x @ w["Wx"] + s @ w["Ws"] + first * w["wf"] + w["bs"])
        p = dfc.sigmoid(dfc.reduce_sum(s * w["wp"], axis=1) + w["bp"])
        halts = running & ((halt_sum + p >= 1 - EPS) | (n + 1 == MAX_PONDER))
        weight = dfc.where(halts, 1 - halt_sum, dfc.where(running, p, 0.0))   # the remainder R when halting
        new_state += weight[:, None] * s
        cost += dfc.where(halts, 1 + (1 - halt_sum), dfc.where(running, 1.0, 0.0))   # N, plus R at the end
        halt_sum += dfc.where(running & ~halts, p, 0.0)
        running = running & ~halts
        n += 1
    return new_state, cost


def act_rnn(xs):
    """Run over xs [time, batch, D]: the output per example and the mean ponder cost per step."""
    w = {v.name: v.read_value() for v in PARAMS}         # this training step's weights
    batch = dfc.shape(xs)[1]
    s = dfc.zeros([batch, H], "float64")
    total_cost = dfc.zeros([batch], "float64")
    t = 0
    while t < dfc.shape(xs)[0]:
        s, cost = ponder(xs[t], s, w)
        total_cost += cost
        t += 1
    y = dfc.reduce_sum(s * w["Wo"], axis=1)
    return y, dfc.reduce_mean(total_cost) / dfc.cast(t, "float64")


def loss_fn(xs, ys):
    y, cost = act_rnn(xs)
    return dfc.reduce_mean(dfc.square(y - ys)) + PONDER_COST * cost, cost


@dfc.function(input_signature=[dfc.TensorSpec([None, None, D], "float64"), dfc.TensorSpec([None], "float64"),
                               dfc.TensorSpec([], "int64")])
def train(xs, ys, steps):
    """`steps` Adam steps in one graph; returns the loss and the mean ponder cost before each step."""
    losses = dfc.TensorArray("float64")
    costs = dfc.TensorArray("float64")
    for k in range(steps):
        loss, cost = loss_fn(xs, ys)
        # opt.minimize(loss, PARAMS) would do, but with an unknown batch size some gradients get a
        # partly unknown static shape that Variable.assign rejects (dfc bug, reported): reshape them.
        grads = dfc.gradients(loss, PARAMS)
        opt.apply_gradients([(dfc.reshape(g, v.shape), v) for g, v in zip(grads, PARAMS)])
        losses = losses.write(k, loss)
        costs = costs.write(k, cost)
    return losses.stack(), costs.stack()


@dfc.function(input_signature=[dfc.TensorSpec([None, None, D], "float64")])
def predict(xs):
    """The output per example and the mean ponder cost (N + R) per time step."""
    return act_rnn(xs)


def act_numpy(xs, params):
    """The same forward pass in plain numpy, one example at a time (the reference)."""
    Wx_, Ws_, wf_, bs_, wp_, bp_, Wo_ = params
    ys, costs = [], []
    for x_seq in xs.transpose(1, 0, 2):
        s, total = np.zeros(H), 0.0
        for x in x_seq:
            halt_sum, state, n = 0.0, np.zeros(H), 0
            while True:
                s = np.tanh(x @ Wx_ + s @ Ws_ + (n == 0) * wf_ + bs_)
                p = 1 / (1 + np.exp(-(s @ wp_ + bp_)))
                n += 1
                if halt_sum + p >= 1 - EPS or n == MAX_PONDER:
                    state += (1 - halt_sum) * s
                    total += n + (1 - halt_sum)
                    break
                state += p * s
                halt_sum += p
            s = state
        ys.append(s @ Wo_)
        costs.append(total / len(x_seq))
    return np.array(ys), float(np.mean(costs))


def make_batch(batch=16, time=4, seed=1):
    """Target: the sum of the products of the two input features over the sequence."""
    r = np.random.default_rng(seed)
    xs = r.uniform(-1, 1, size=(time, batch, D))
    return xs, (xs[:, :, 0] * xs[:, :, 1]).sum(0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args(argv)
    xs, ys = make_batch()
    y, cost = predict(xs)
    y_ref, cost_ref = act_numpy(xs, [v.initial_value for v in PARAMS])
    print(f"forward vs numpy ACT: max |diff| {np.max(np.abs(y - y_ref)):.2e}, ponder cost {float(cost):.3f} "
          f"(numpy {cost_ref:.3f})")
    losses, costs = train(xs, ys, np.int64(args.steps))
    print(f"Adam, {args.steps} in-graph steps through nested loops: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"ponder cost per step {costs[0]:.2f} -> {costs[-1]:.2f}")
    return losses, costs


if __name__ == "__main__":
    main()
