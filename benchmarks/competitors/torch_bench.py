"""PyTorch (eager) side of the benchmarks (competitors' venv). argv[1]: JSON config; prints JSON."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from lstm_problem import make_inputs  # noqa: E402
from bench_util import median_time as timed, run_task  # noqa: E402


def loop(n, reps):
    k = min(n, 20000)

    def f():
        i = torch.tensor(0)
        lim = torch.tensor(k)
        while i < lim:
            i = i + 1
    return {"iterations_per_s": k / timed(f, reps)}


def lstm_step(x, W, b):
    """A function that runs one eager LSTM training step on these numpy arrays: -> (dW, db) tensors."""
    T, B, H = x.shape
    x = torch.from_numpy(x)
    Wt, bt = torch.from_numpy(W).requires_grad_(), torch.from_numpy(b).requires_grad_()

    def step():
        Wt.grad = bt.grad = None
        h = c = torch.zeros(B, H)
        loss = torch.zeros(())
        for t in range(T):
            z = torch.cat([x[t], h], 1) @ Wt + bt
            i, f, o = (torch.sigmoid(z[:, k * H:(k + 1) * H]) for k in range(3))
            g = torch.tanh(z[:, 3 * H:])
            c = f * c + i * g
            h = o * torch.tanh(c)
            loss = loss + h.sum()
        loss = loss + (h * h).sum()
        loss.backward()
        return Wt.grad, bt.grad
    return step


def lstm(H, B, T, reps, grads_out):
    step = lstm_step(*make_inputs(H, B, T))
    dW, db = step()
    np.savez(grads_out, dW=dW.numpy(), db=db.numpy())
    return {"ms_per_step": timed(step, reps) * 1e3}


if __name__ == "__main__":
    torch.set_num_threads(2)
    run_task(loop, lstm)
