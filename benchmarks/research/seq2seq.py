"""Seq2seq with dot-product attention, float32: a tanh-RNN encoder over the source, a tanh-RNN decoder
whose input is the previous token's embedding and the attention context over the encoder states.

* decode: greedy decoding of a batch until every sequence has emitted EOS or max_len tokens (the stop
  depends on the tokens); returns the tokens and the number of steps.
* train: the teacher-forced cross-entropy of a target batch and its gradients wrt the 7 weights.

numpy: decode and the training loss (no hand-written adjoint; the gradients are checked against JAX).
JAX: lax.scan for the encoder and teacher forcing, lax.while_loop for decoding.
"""
import numpy as np

import dfc

BOS, EOS = 0, 1
SIZES = {"bench": dict(B=16, S=12, T=12, V=32, E=32, H=64, max_len=20),
         "tiny": dict(B=3, S=4, T=4, V=8, E=4, H=6, max_len=6)}


def encode(src, emb_src, W_e, U_e):
    B, S = dfc.shape(src)[0], dfc.shape(src)[1]
    h = dfc.zeros([B, dfc.shape(U_e)[0]])
    states = dfc.TensorArray("float32", size=S)
    for s in range(S):
        h = dfc.tanh(dfc.matmul(dfc.gather(emb_src, src[:, s]), W_e) + dfc.matmul(h, U_e))
        states = states.write(s, h)
    return dfc.transpose(states.stack(), [1, 0, 2]), h          # [B, S, H], final state


def decoder_step(y_prev, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o):
    scores = dfc.reduce_sum(enc * h[:, None, :], axis=2)          # [B, S]
    attn = dfc.softmax(scores, axis=1)
    context = dfc.reduce_sum(attn[:, :, None] * enc, axis=1)      # [B, H]
    h = dfc.tanh(dfc.matmul(dfc.gather(emb_tgt, y_prev), W_d) + dfc.matmul(h, U_d) + dfc.matmul(context, C_d))
    return h, dfc.matmul(h, W_o) + b_o


@dfc.function
def greedy_decode(src, max_len, emb_src, W_e, U_e, emb_tgt, W_d, U_d, C_d, W_o, b_o):
    enc, h = encode(src, emb_src, W_e, U_e)
    B = dfc.shape(src)[0]
    y = dfc.full([B], BOS, dtype="int64")
    done = dfc.zeros([B], dtype="bool")
    tokens = dfc.TensorArray("int64", size=0)          # grows: decoding may stop early
    t = 0
    while t < max_len and not dfc.reduce_all(done):
        h, logits = decoder_step(y, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o)
        y = dfc.where(done, EOS, dfc.argmax(logits, axis=1))
        tokens = tokens.write(t, y)
        done = done | (y == EOS)
        t += 1
    return dfc.transpose(tokens.stack()), t


def teacher_forced_loss(src, tgt, emb_src, W_e, U_e, emb_tgt, W_d, U_d, C_d, W_o, b_o):
    enc, h = encode(src, emb_src, W_e, U_e)
    B, T = dfc.shape(tgt)[0], dfc.shape(tgt)[1]
    V = W_o.shape[1]                # one_hot needs the depth while tracing
    y_prev = dfc.full([B], BOS, dtype="int64")
    loss = 0.0
    for t in range(T):
        h, logits = decoder_step(y_prev, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o)
        loss = loss - dfc.reduce_sum(dfc.one_hot(tgt[:, t], V) * dfc.log_softmax(logits, axis=1))
        y_prev = tgt[:, t]
    return loss / dfc.cast(B * T, "float32")


@dfc.function
def train_step(src, tgt, emb_src, W_e, U_e, emb_tgt, W_d, U_d, C_d, W_o, b_o):
    params = [emb_src, W_e, U_e, emb_tgt, W_d, U_d, C_d, W_o, b_o]
    loss = teacher_forced_loss(src, tgt, *params)
    return loss, dfc.gradients(loss, params)


def params(cfg, seed=0):
    rng = np.random.default_rng(seed)
    V, E, H = cfg["V"], cfg["E"], cfg["H"]

    def m(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    b_o = np.zeros(V, np.float32)
    b_o[EOS] = 1.0          # some sequences end before max_len
    return [m(V, E), m(E, H), m(H, H), m(V, E), m(E, H), m(H, H), m(H, H), m(H, V), b_o]


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed + 1)
    src = rng.integers(2, cfg["V"], size=(cfg["B"], cfg["S"])).astype(np.int64)
    tgt = rng.integers(1, cfg["V"], size=(cfg["B"], cfg["T"])).astype(np.int64)
    return src, tgt, cfg["max_len"], params(cfg, seed)


def _softmax(z, axis):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def numpy_encode(src, emb_src, W_e, U_e):
    h, states = np.zeros((src.shape[0], U_e.shape[0]), np.float32), []
    for s in range(src.shape[1]):
        h = np.tanh(emb_src[src[:, s]] @ W_e + h @ U_e)
        states.append(h)
    return np.stack(states, 1), h


def numpy_step(y_prev, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o):
    attn = _softmax(np.sum(enc * h[:, None, :], 2), 1)
    context = np.sum(attn[:, :, None] * enc, 1)
    h = np.tanh(emb_tgt[y_prev] @ W_d + h @ U_d + context @ C_d)
    return h, h @ W_o + b_o


def numpy_decode(src, max_len, emb_src, W_e, U_e, *dec):
    enc, h = numpy_encode(src, emb_src, W_e, U_e)
    y, done, tokens = np.full(src.shape[0], BOS, np.int64), np.zeros(src.shape[0], bool), []
    while len(tokens) < max_len and not done.all():
        h, logits = numpy_step(y, h, enc, *dec)
        y = np.where(done, EOS, logits.argmax(1))
        tokens.append(y)
        done |= y == EOS
    return np.stack(tokens, 1), np.int64(len(tokens))


def numpy_loss(src, tgt, emb_src, W_e, U_e, *dec):
    enc, h = numpy_encode(src, emb_src, W_e, U_e)
    y, loss = np.full(src.shape[0], BOS, np.int64), 0.0
    for t in range(tgt.shape[1]):
        h, logits = numpy_step(y, h, enc, *dec)
        z = logits - logits.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        loss -= logp[np.arange(len(y)), tgt[:, t]].sum()
        y = tgt[:, t]
    return np.float32(loss / tgt.size)


def _jax():
    import jax
    import jax.numpy as jnp

    def encode_j(src, emb_src, W_e, U_e):
        def step(h, x):
            h = jnp.tanh(emb_src[x] @ W_e + h @ U_e)
            return h, h
        h, states = jax.lax.scan(step, jnp.zeros((src.shape[0], U_e.shape[0]), jnp.float32), src.T)
        return jnp.transpose(states, (1, 0, 2)), h

    def step_j(y_prev, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o):
        attn = jax.nn.softmax(jnp.sum(enc * h[:, None, :], 2), 1)
        context = jnp.sum(attn[:, :, None] * enc, 1)
        h = jnp.tanh(emb_tgt[y_prev] @ W_d + h @ U_d + context @ C_d)
        return h, h @ W_o + b_o

    def decode(src, max_len, emb_src, W_e, U_e, *dec):
        enc, h = encode_j(src, emb_src, W_e, U_e)
        B = src.shape[0]

        def body(s):
            t, y, h, done, tokens = s
            h, logits = step_j(y, h, enc, *dec)
            y = jnp.where(done, EOS, jnp.argmax(logits, 1))
            return t + 1, y, h, done | (y == EOS), tokens.at[:, t].set(y)
        t, _, _, _, tokens = jax.lax.while_loop(
            lambda s: (s[0] < max_len) & ~jnp.all(s[3]), body,
            (0, jnp.full(B, BOS), h, jnp.zeros(B, bool), jnp.full((B, max_len), EOS)))
        return tokens, t

    def loss(params, src, tgt):
        emb_src, W_e, U_e, *dec = params
        enc, h = encode_j(src, emb_src, W_e, U_e)

        def step(carry, y_t):
            h, y_prev = carry
            h, logits = step_j(y_prev, h, enc, *dec)
            return (h, y_t), -jnp.sum(jax.nn.log_softmax(logits, 1)[jnp.arange(y_t.shape[0]), y_t])
        _, losses = jax.lax.scan(step, (h, jnp.full(src.shape[0], BOS)), tgt.T)
        return jnp.sum(losses) / tgt.size
    return jax, jax.jit(decode, static_argnums=1), jax.jit(jax.value_and_grad(loss))


def _torch():
    import torch

    def encode_t(src, emb_src, W_e, U_e):
        h, states = torch.zeros(src.shape[0], U_e.shape[0]), []
        for s in range(src.shape[1]):
            h = torch.tanh(emb_src[src[:, s]] @ W_e + h @ U_e)
            states.append(h)
        return torch.stack(states, 1), h

    def step_t(y_prev, h, enc, emb_tgt, W_d, U_d, C_d, W_o, b_o):
        attn = torch.softmax(torch.sum(enc * h[:, None, :], 2), 1)
        context = torch.sum(attn[:, :, None] * enc, 1)
        h = torch.tanh(emb_tgt[y_prev] @ W_d + h @ U_d + context @ C_d)
        return h, h @ W_o + b_o

    def decode(src, max_len, emb_src, W_e, U_e, *dec):
        with torch.no_grad():
            enc, h = encode_t(src, emb_src, W_e, U_e)
            y = torch.full((src.shape[0],), BOS)
            done, tokens = torch.zeros(src.shape[0], dtype=torch.bool), []
            while len(tokens) < max_len and not bool(done.all()):
                h, logits = step_t(y, h, enc, *dec)
                y = torch.where(done, EOS, logits.argmax(1))
                tokens.append(y)
                done = done | (y == EOS)
        return torch.stack(tokens, 1).numpy(), np.int64(len(tokens))

    def train(src, tgt, *params):
        ps = [p.detach().requires_grad_(True) for p in params]
        emb_src, W_e, U_e, *dec = ps
        enc, h = encode_t(src, emb_src, W_e, U_e)
        y, loss = torch.full((src.shape[0],), BOS), 0.0
        for t in range(tgt.shape[1]):
            h, logits = step_t(y, h, enc, *dec)
            loss = loss - torch.sum(torch.log_softmax(logits, 1)[torch.arange(y.shape[0]), tgt[:, t]])
            y = tgt[:, t]
        loss = loss / tgt.numel()
        return loss.detach().numpy(), [g.numpy() for g in torch.autograd.grad(loss, ps)]
    return torch, decode, train


def cases(size="bench"):
    from benchmarks.research.case import Case
    src, tgt, max_len, ps = inputs(size)
    max_len = np.int64(max_len)

    def jax_decode():
        jax, dec, _ = _jax()
        return lambda: [np.asarray(v) for v in jax.block_until_ready(dec(src, int(max_len), *ps))]

    def jax_train():
        jax, _, tr = _jax()

        def run():
            loss, grads = jax.block_until_ready(tr(ps, src, tgt))
            return np.asarray(loss), [np.asarray(g) for g in grads]
        return run

    def torch_decode():
        torch, dec, _ = _torch()
        a = [torch.from_numpy(src), int(max_len)] + [torch.from_numpy(p) for p in ps]
        return lambda: dec(*a)

    def torch_train():
        torch, _, tr = _torch()
        a = [torch.from_numpy(src), torch.from_numpy(tgt)] + [torch.from_numpy(p) for p in ps]
        return lambda: tr(*a)

    def check_decode():
        got = greedy_decode(src, max_len, *ps)
        out = [("dfc vs numpy", numpy_decode(src, max_len, *ps), got)]
        try:
            toks, t = jax_decode()()
            out.append(("JAX vs numpy", numpy_decode(src, max_len, *ps), (toks[:, :int(t)], t)))
        except ImportError:
            pass
        return out

    def check_train():
        loss, grads = train_step(src, tgt, *ps)
        out = [("dfc loss vs numpy", numpy_loss(src, tgt, *ps), loss)]
        try:
            out.append(("dfc gradients vs JAX", jax_train()()[1], grads))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    dims = f"B={cfg['B']} S={cfg['S']} V={cfg['V']} E={cfg['E']} H={cfg['H']}, float32"
    return [Case("seq2seq_decode", f"greedy decoding with attention until EOS or {max_len} tokens, {dims}",
                 dfc_call=lambda: greedy_decode(src, max_len, *ps),
                 numpy=lambda: numpy_decode(src, max_len, *ps), jax=jax_decode, torch=torch_decode,
                 check=check_decode, rtol=0, atol=0),
            Case("seq2seq_train", f"teacher-forced training step (loss + 9 gradients), T={cfg['T']}, {dims}",
                 dfc_call=lambda: train_step(src, tgt, *ps), numpy=lambda: numpy_loss(src, tgt, *ps),
                 jax=jax_train, torch=torch_train, check=check_train, rtol=2e-4, atol=1e-6,
                 numpy_note="forward loss only (no hand-written adjoint)")]
