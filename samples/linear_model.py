"""The w, b model of the course note: Read/AssignAdd updates, the whole training loop in ONE while loop,
a checkpoint saved during training and restored afterwards.

    z = x @ w + b,  e = mean((z - y)^2)
    de/db = mean(2 (z - y)),  de/dw = x^T 2 (z - y) / n        (dfc.gradients builds these nodes)
    w += -lr * de/dw,  b += -lr * de/db                         (AssignAdd, as in the course note's graph)

`train` is one graph: a `while` over the steps whose body reads the variables
(ReadVariable), computes the loss and its gradients and updates the
variables in place (AssignAdd); at step SAVE_AT it also saves w and b to
CHECKPOINT (a Save node inside the loop). `restore_and_evaluate`, a separate
graph, restores them (Restore + Assign) and evaluates the restored model.

    python samples/linear_model.py [--steps 100]
    dfc compile samples/linear_model.py -o out   # -> out/train.json, out/restore_and_evaluate.json
    dfc run out/train.json --input xs=@xs.npy --input ys=@ys.npy --input steps=100 --json --checkpoint-dir out
    dfc run out/restore_and_evaluate.json --input xs=@xs.npy --input ys=@ys.npy --json --checkpoint-dir out

Inside the loop, `dfc.progress` drives a progress bar (on a terminal, or with `dfc run --progress`) and
`dfc.summary.scalar` writes the error curve for TensorBoard when a summary writer is set:
`python samples/linear_model.py --logdir logs` (or `DFC_SUMMARY_DIR=logs dfc run out/train.json ...`),
then `tensorboard --logdir logs`.

The checkpoint file is $LINEAR_MODEL_CHECKPOINT, by default dfc_linear_model.npz (its path is fixed
when the graph is built). A relative path is relative to the current directory when the functions run
in this process, and to the checkpoint directory (`--checkpoint-dir`, default the current directory)
when `dfc run` runs the compiled graphs: a graph loaded from a file may only save and restore there.
"""
import argparse
import os

import numpy as np

import dfc

D = 3
LEARNING_RATE = 0.1
SAVE_AT = 20
CHECKPOINT = os.environ.get("LINEAR_MODEL_CHECKPOINT", "dfc_linear_model.npz")

w = dfc.Variable(np.zeros(D), name="w")
b = dfc.Variable(np.float64(0.0), name="b")
checkpoint = dfc.Checkpoint({"w": w, "b": b})

DATA = [dfc.TensorSpec([None, D], "float64"), dfc.TensorSpec([None], "float64")]


def error(xs, ys, w_value, b_value):
    z = dfc.reduce_sum(xs * w_value, axis=1) + b_value        # xs @ w (dfc.matmul wants rank >= 2)
    return dfc.reduce_mean(dfc.square(z - ys))


@dfc.function(input_signature=DATA + [dfc.TensorSpec([], "int64")])
def train(xs, ys, steps):
    """`steps` gradient-descent steps in one while loop; returns the error before each step."""
    errors = dfc.TensorArray("float64")
    step = 0
    while step < steps:
        w_value, b_value = w.read_value(), b.read_value()        # ReadVariable
        e = error(xs, ys, w_value, b_value)
        dfc.summary.scalar("error", e, step)                     # TensorBoard, when a writer is set
        dfc.progress(step + 1, steps, name="train", error=e)     # a bar, on a terminal
        if step == SAVE_AT:
            checkpoint.save(CHECKPOINT)                          # Save: w, b as they are now
        de_dw, de_db = dfc.gradients(e, [w_value, b_value])
        w.assign_add(-LEARNING_RATE * de_dw)                     # AssignAdd
        b.assign_add(-LEARNING_RATE * de_db)
        errors = errors.write(step, e)
        step += 1
    return errors.stack(), w.read_value(), b.read_value()


@dfc.function(input_signature=DATA)
def restore_and_evaluate(xs, ys):
    """Restore w and b from the checkpoint (Restore + Assign), then evaluate the error of the restored model."""
    w_value, b_value = checkpoint.restore(CHECKPOINT)
    return w_value, b_value, error(xs, ys, w_value, b_value)


def train_numpy(xs, ys, steps):
    """The same gradient descent in numpy (the reference): the errors, and w, b after `steps` steps."""
    wn, bn, errors = np.zeros(D), 0.0, []
    for _ in range(steps):
        r = xs @ wn + bn - ys
        errors.append(np.mean(r ** 2))
        wn, bn = wn - LEARNING_RATE * 2 * xs.T @ r / len(ys), bn - LEARNING_RATE * 2 * np.mean(r)
    return np.array(errors), wn, bn


def make_data(n=64, seed=0):
    r = np.random.default_rng(seed)
    xs = r.normal(size=(n, D))
    return xs, xs @ np.array([1.5, -2.0, 0.5]) + 0.7 + 0.05 * r.normal(size=n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--logdir", default=None, help="write the error curve here for TensorBoard")
    args = p.parse_args(argv)
    xs, ys = make_data()
    if args.logdir:
        with dfc.summary.create_file_writer(args.logdir).as_default():
            errors, w_final, b_final = train(xs, ys, np.int64(args.steps))
    else:
        errors, w_final, b_final = train(xs, ys, np.int64(args.steps))
    want_errors, want_w, want_b = train_numpy(xs, ys, args.steps)
    assert np.allclose(errors, want_errors) and np.allclose(w_final, want_w) and np.isclose(b_final, want_b)
    print(f"{args.steps} steps in one while loop: error {errors[0]:.4f} -> {errors[-1]:.4f}, "
          f"w = {np.round(w_final, 3).tolist()}, b = {float(b_final):.3f} (same as numpy)")
    w_saved, b_saved, e_saved = restore_and_evaluate(xs, ys)
    print(f"restored the checkpoint saved at step {SAVE_AT}: w = {np.round(w_saved, 3).tolist()}, "
          f"b = {float(b_saved):.3f}, error {float(e_saved):.4f} (the error at step {SAVE_AT} was "
          f"{errors[SAVE_AT]:.4f})")
    return errors, e_saved


if __name__ == "__main__":
    main()
