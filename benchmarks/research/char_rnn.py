"""A character-level RNN language model (Elman: h = tanh(W_xh[c] + h W_hh + b_h), logits = h W_hy + b_y),
float32; token 0 is the end token and also starts every sequence.

* Sampling: a batch of sequences drawn with temperature, each token by inverse CDF of one uniform draw
  made inside the program, until every sequence has emitted the end token or max_len (a `while` on a
  tensor condition); finished sequences keep emitting the end token.
* Training: the teacher-forced loss of a padded batch of variable-length sequences (mean next-token
  cross-entropy over the real tokens) and its gradients; the time loop runs to the batch's longest
  sequence (a tensor bound), masking the finished ones.

JAX: sampling as lax.while_loop into a [max_len, B] buffer; training as lax.scan over the padded length
(reverse mode refuses a while_loop / a tensor trip count). numpy: sampling (replaying dfc's draws for the
check) and the training loss (no hand-written adjoint; gradients checked against JAX).
"""
import numpy as np

import dfc

SIZES = {"bench": dict(V=32, H=128, B=16, max_len=80, T=60), "tiny": dict(V=6, H=5, B=3, max_len=12, T=7)}
END = 0
TEMPERATURE = 0.8


@dfc.function
def sample(W_xh, W_hh, b_h, W_hy, b_y, n_samples, max_len, record=False):
    h = dfc.zeros([n_samples, dfc.shape(W_hh)[0]])
    tok = dfc.fill([n_samples], END)
    done = dfc.zeros([n_samples], dtype="bool")
    tokens = dfc.TensorArray("int64", size=0)
    draws = dfc.TensorArray("float32", size=0)
    t = 0
    while t < max_len and not dfc.reduce_all(done):
        h = dfc.tanh(W_xh[tok] + h @ W_hh + b_h)
        p = dfc.softmax((h @ W_hy + b_y) / TEMPERATURE, axis=-1)
        u = dfc.random_uniform([n_samples])
        tok = dfc.reduce_sum(dfc.cast(dfc.cumsum(p, axis=1) < u[:, None], "int64"), axis=1)
        tok = dfc.where(done, END, dfc.minimum(tok, dfc.shape(p)[1] - 1))
        tokens = tokens.write(t, tok)
        done = done | (tok == END)
        t += 1
        if record:
            draws = draws.write(t - 1, u)
    if record:
        return dfc.transpose(tokens.stack()), t, draws.stack()
    return dfc.transpose(tokens.stack()), t


@dfc.function
def train_step(seqs, lengths, W_xh, W_hh, b_h, W_hy, b_y):
    n = dfc.shape(seqs)[0]
    h = dfc.zeros([n, dfc.shape(W_hh)[0]])
    total = 0.0
    for t in range(dfc.reduce_max(lengths) - 1):
        h = dfc.tanh(W_xh[seqs[:, t]] + h @ W_hh + b_h)
        nll = -dfc.take_along_axis(dfc.log_softmax(h @ W_hy + b_y, axis=-1), seqs[:, t + 1][:, None], axis=1)[:, 0]
        total += dfc.reduce_sum(dfc.where(t + 1 < lengths, nll, 0.0))
    loss = total / dfc.cast(dfc.reduce_sum(lengths - 1), "float32")
    return loss, dfc.gradients(loss, [W_xh, W_hh, b_h, W_hy, b_y])


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    V, H, B, T = cfg["V"], cfg["H"], cfg["B"], cfg["T"]
    f = np.float32
    params = [(rng.standard_normal((V, H)) * 0.5).astype(f), (rng.standard_normal((H, H)) / np.sqrt(H)).astype(f),
              np.zeros(H, f), (rng.standard_normal((H, V)) / np.sqrt(H)).astype(f), np.zeros(V, f)]
    params[4][END] = 0.5                               # the end token comes up often enough to stop early
    lengths = rng.integers(T // 3, T + 1, B)           # with the end token; the sequence starts with END too
    seqs = np.full((B, T + 1), END, np.int64)
    for b, n in enumerate(lengths):
        seqs[b, 1:n] = rng.integers(1, V, n - 1)
    return params, seqs, (lengths + 1).astype(np.int64), np.int64(B), np.int64(cfg["max_len"])


def _sm(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def numpy_sample(W_xh, W_hh, b_h, W_hy, b_y, n_samples, max_len, draws=None, seed=1):
    """draws: dfc's uniform draws [steps, B] to replay, else numpy's own."""
    rng = np.random.default_rng(seed)
    B = int(n_samples)
    h, tok, done, out, t = np.zeros((B, W_hh.shape[0]), np.float32), np.full(B, END), np.zeros(B, bool), [], 0
    while t < max_len and not done.all():
        h = np.tanh(W_xh[tok] + h @ W_hh + b_h)
        p = _sm((h @ W_hy + b_y) / np.float32(TEMPERATURE))
        u = draws[t] if draws is not None else rng.uniform(size=B).astype(np.float32)
        tok = np.where(done, END, np.minimum((np.cumsum(p, axis=1) < u[:, None]).sum(1), p.shape[1] - 1))
        out.append(tok)
        done |= tok == END
        t += 1
    return np.array(out, np.int64).T, np.int64(t)


def numpy_loss(seqs, lengths, W_xh, W_hh, b_h, W_hy, b_y):
    h, total = np.zeros((len(seqs), W_hh.shape[0]), np.float32), 0.0
    for t in range(int(lengths.max()) - 1):
        h = np.tanh(W_xh[seqs[:, t]] + h @ W_hh + b_h)
        z = h @ W_hy + b_y
        z = z - z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        total += np.sum(np.where(t + 1 < lengths, -logp[np.arange(len(seqs)), seqs[:, t + 1]], 0.0))
    return W_hh.dtype.type(total / np.sum(lengths - 1))          # float64 weights: a float64 loss (differences)


def _jax_sample(n_samples, max_len):
    import jax
    import jax.numpy as jnp

    def run(key, W_xh, W_hh, b_h, W_hy, b_y, draws=None):
        def cond(s):
            return (s[0] < max_len) & ~jnp.all(s[3])

        def body(s):
            t, h, tok, done, out = s
            h = jnp.tanh(W_xh[tok] + h @ W_hh + b_h)
            p = jax.nn.softmax((h @ W_hy + b_y) / TEMPERATURE, axis=-1)
            u = draws[t] if draws is not None else jax.random.uniform(jax.random.fold_in(key, t), (n_samples,))
            tok = jnp.where(done, END, jnp.minimum(jnp.sum(jnp.cumsum(p, axis=1) < u[:, None], 1), p.shape[1] - 1))
            return t + 1, h, tok, done | (tok == END), out.at[t].set(tok)
        init = (0, jnp.zeros((n_samples, W_hh.shape[0]), jnp.float32), jnp.full(n_samples, END),
                jnp.zeros(n_samples, bool), jnp.full((max_len, n_samples), END))
        t, _, _, _, out = jax.lax.while_loop(cond, body, init)
        return out.T, t
    f = jax.jit(run)
    key = jax.random.PRNGKey(0)

    def call(params, draws=None):
        out, t = jax.block_until_ready(f(key, *params, draws))
        return np.asarray(out)[:, :int(t)], np.int64(t)
    return call


def _jax_train():
    import jax
    import jax.numpy as jnp

    def loss(params, seqs, lengths):
        W_xh, W_hh, b_h, W_hy, b_y = params
        B, T1 = seqs.shape

        def step(h, t):
            h = jnp.tanh(W_xh[seqs[:, t]] + h @ W_hh + b_h)
            logp = jax.nn.log_softmax(h @ W_hy + b_y, axis=-1)
            nll = -jnp.take_along_axis(logp, seqs[:, t + 1][:, None], axis=1)[:, 0]
            return h, jnp.sum(jnp.where(t + 1 < lengths, nll, 0.0))
        _, per_t = jax.lax.scan(step, jnp.zeros((B, W_hh.shape[0]), jnp.float32), jnp.arange(T1 - 1))
        return jnp.sum(per_t) / jnp.sum(lengths - 1).astype(jnp.float32)
    f = jax.jit(jax.value_and_grad(loss))

    def call(seqs, lengths, *params):
        l, g = jax.block_until_ready(f(list(params), seqs, lengths))
        return np.asarray(l), [np.asarray(v) for v in g]
    return call


def _torch_sample(n_samples, max_len):
    import torch
    torch.manual_seed(0)

    def run(W_xh, W_hh, b_h, W_hy, b_y):
        B = n_samples
        h, tok = torch.zeros(B, W_hh.shape[0]), torch.full((B,), END, dtype=torch.int64)
        done, out, t = torch.zeros(B, dtype=torch.bool), [], 0
        with torch.no_grad():
            while t < max_len and not bool(done.all()):
                h = torch.tanh(W_xh[tok] + h @ W_hh + b_h)
                p = torch.softmax((h @ W_hy + b_y) / TEMPERATURE, -1)
                u = torch.rand(B)
                tok = (torch.cumsum(p, 1) < u[:, None]).sum(1).clamp(max=p.shape[1] - 1)
                tok = torch.where(done, torch.full_like(tok, END), tok)
                out.append(tok)
                done |= tok == END
                t += 1
        return torch.stack(out, 1).numpy(), np.int64(t)
    return lambda params: run(*[torch.from_numpy(p) for p in params])


def _torch_train():
    import torch

    def run(seqs, lengths, *params):
        ps = [torch.from_numpy(p).requires_grad_(True) for p in params]
        W_xh, W_hh, b_h, W_hy, b_y = ps
        seqs, lengths = torch.from_numpy(seqs), torch.from_numpy(lengths)
        h, total = torch.zeros(len(seqs), W_hh.shape[0]), 0.0
        for t in range(int(lengths.max()) - 1):
            h = torch.tanh(W_xh[seqs[:, t]] + h @ W_hh + b_h)
            nll = torch.nn.functional.cross_entropy(h @ W_hy + b_y, seqs[:, t + 1], reduction="none")
            total = total + torch.where(t + 1 < lengths, nll, torch.zeros_like(nll)).sum()
        loss = total / (lengths - 1).sum()
        return loss.detach().numpy(), [g.numpy() for g in torch.autograd.grad(loss, ps)]
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    params, seqs, lengths, B, max_len = inputs(size)
    cfg = SIZES[size]

    def check_sample():
        tokens, steps, draws = sample(*params, B, max_len, True)
        ref = numpy_sample(*params, B, max_len, draws)
        out = [("dfc vs numpy (dfc's draws replayed)", ref, (tokens, steps))]
        try:
            replay = np.zeros((int(max_len), int(B)), np.float32)
            replay[:len(draws)] = draws
            out.append(("JAX vs numpy (dfc's draws replayed)", ref, _jax_sample(int(B), int(max_len))(params, replay)))
        except ImportError:
            pass
        return out

    def check_train():
        loss, grads = train_step(seqs, lengths, *params)
        out = [("dfc loss vs numpy", numpy_loss(seqs, lengths, *params), loss)]
        try:
            out.append(("dfc gradients vs JAX", _jax_train()(seqs, lengths, *params)[1], grads))
        except ImportError:
            pass
        return out

    model = f"char-RNN V={cfg['V']} H={cfg['H']}, float32"
    return [Case("char_rnn_sample", f"{model}: sample {int(B)} sequences with temperature {TEMPERATURE} until each "
                                    f"emits the end token (max {int(max_len)}), in-graph uniform draws",
                 dfc_call=lambda: sample(*params, B, max_len),
                 numpy=lambda: numpy_sample(*params, B, max_len),
                 jax=lambda: (lambda f: lambda: f(params))(_jax_sample(int(B), int(max_len))),
                 torch=lambda: (lambda f: lambda: f(params))(_torch_sample(int(B), int(max_len))),
                 check=check_sample, rtol=1e-6, atol=0,
                 note="each system draws its own numbers (lengths differ); checked by replaying dfc's draws",
                 jax_note=f"lax.while_loop into a [{int(max_len)}, B] buffer"),
            Case("char_rnn_train", f"{model}: teacher-forced loss and gradients over {int(B)} padded sequences of "
                                   f"lengths {int(lengths.min())}..{int(lengths.max())}, time loop to the longest",
                 dfc_call=lambda: train_step(seqs, lengths, *params),
                 numpy=lambda: numpy_loss(seqs, lengths, *params),
                 jax=lambda: (lambda f: lambda: f(seqs, lengths, *params))(_jax_train()),
                 torch=lambda: (lambda f: lambda: f(seqs, lengths, *params))(_torch_train()),
                 check=check_train, rtol=2e-4, atol=1e-6, numpy_note="loss only (no hand-written adjoint)",
                 jax_note="lax.scan over the padded length with a mask (reverse mode refuses while_loop)")]
