"""Dynamic RNN: an LSTM over variable-length sequences, trained with Adam inside the graph.

The task: each sequence holds numbers x_t (padded with zeros up to the batch's
array length); the target is the mean of x_t over the sequence's TRUE length,
which the LSTM must learn to accumulate and normalise. The time loop is an in-graph `while` that runs to
the batch's true maximum length (not the padded length): finished sequences
keep their state through `dfc.where`, as in TensorFlow's dynamic_rnn.

    python samples/dynamic_rnn.py [--steps 60]
    dfc compile samples/dynamic_rnn.py -o out        # -> out/train.json, out/predict.json
    dfc run out/predict.json --input xs=@xs.npy --input lengths=[3,5] --json
"""
import argparse

import numpy as np

import dfc

D, H = 1, 8                 # input features, hidden units
rng = np.random.default_rng(0)
Wx = dfc.Variable(rng.normal(size=(D, 4 * H)) * 0.5, name="Wx")
Wh = dfc.Variable(rng.normal(size=(H, 4 * H)) * 0.5 / np.sqrt(H), name="Wh")
b = dfc.Variable(np.concatenate([np.zeros(H), np.ones(H), np.zeros(2 * H)]), name="b")   # forget bias 1
Wo = dfc.Variable(rng.normal(size=(H, 1)) * 0.5, name="Wo")
PARAMS = [Wx, Wh, b, Wo]
opt = dfc.train.Adam(0.05)

SEQUENCES = [dfc.TensorSpec([None, None, D], "float64"),    # xs: [time, batch, features], zero padded
             dfc.TensorSpec([None], "int64")]               # lengths: [batch]


def lstm(xs, lengths):
    """Final hidden state of each sequence, and how many time steps the loop ran."""
    wx, wh, bias = Wx.read_value(), Wh.read_value(), b.read_value()   # this step's weights
    batch = dfc.shape(xs)[1]
    h = dfc.zeros([batch, H], "float64")
    c = dfc.zeros([batch, H], "float64")
    t = 0
    while t < dfc.reduce_max(lengths):          # the batch's true max length, not the padded one
        z = xs[t] @ wx + h @ wh + bias
        i, f, o, g = dfc.split(z, 4, axis=1)
        c_new = dfc.sigmoid(f) * c + dfc.sigmoid(i) * dfc.tanh(g)
        h_new = dfc.sigmoid(o) * dfc.tanh(c_new)
        alive = dfc.expand_dims(t < lengths, 1)  # sequences still running keep their new state
        c = dfc.where(alive, c_new, c)
        h = dfc.where(alive, h_new, h)
        t += 1
    return h, t


def loss_fn(xs, lengths, ys):
    h, _ = lstm(xs, lengths)
    pred = (h @ Wo.read_value())[:, 0]
    return dfc.reduce_mean(dfc.square(pred - ys))


@dfc.function(input_signature=SEQUENCES + [dfc.TensorSpec([None], "float64"), dfc.TensorSpec([], "int64")])
def train(xs, lengths, ys, steps):
    """`steps` Adam steps, all in one graph; returns the loss before each step."""
    losses = dfc.TensorArray("float64")
    for k in range(steps):
        loss = loss_fn(xs, lengths, ys)
        opt.minimize(loss, PARAMS)
        losses = losses.write(k, loss)
    return losses.stack()


@dfc.function(input_signature=SEQUENCES)
def predict(xs, lengths):
    """The model's output per sequence and the number of time steps the loop ran."""
    h, steps = lstm(xs, lengths)
    return (h @ Wo.read_value())[:, 0], steps


def make_batch(batch=16, padded_len=12, max_len=9, seed=1):
    """Random sequences of lengths 1..max_len in arrays padded to padded_len; target = mean over the true length."""
    r = np.random.default_rng(seed)
    lengths = r.integers(1, max_len + 1, size=batch)
    lengths[0] = max_len
    xs = r.uniform(-1, 1, size=(padded_len, batch, D))
    xs[np.arange(padded_len)[:, None] >= lengths[None, :]] = 0.0
    ys = xs[:, :, 0].sum(0) / lengths
    return xs, lengths.astype(np.int64), ys


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args(argv)
    xs, lengths, ys = make_batch()
    _, loop_steps = predict(xs, lengths)
    print(f"{xs.shape[1]} sequences padded to {xs.shape[0]} steps, true lengths {lengths.tolist()}: "
          f"the time loop ran {int(loop_steps)} iterations")
    losses = train(xs, lengths, ys, np.int64(args.steps))
    print(f"Adam, {args.steps} in-graph steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
