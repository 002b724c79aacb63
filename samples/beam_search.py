"""Greedy and beam-search decoding in the graph, stopping as soon as every beam has emitted EOS.

A tiny fixed (seeded) RNN language model conditioned on a source sequence:

    h_0 = tanh(sum_j E_src[source_j]),  h_t = tanh(E[token_{t-1}] + h_{t-1} @ W),  p(token_t) = softmax(h_t @ U)

Greedy decoding is a `while` with a `break` on EOS. Beam search keeps the
BEAM best partial outputs; each step scores all BEAM * V extensions, keeps the
best BEAM, and records (token, parent beam) in two TensorArrays; a second
loop walks the parents backwards to spell out each beam (TensorFlow's
gather_tree). A finished beam may only extend itself with EOS at no cost. The
loop condition is data dependent: `t < MAX_LEN and not all(finished)`.
Both decoders are checked against a plain-numpy reference.

    python samples/beam_search.py
    dfc compile samples/beam_search.py -o out       # -> out/greedy_decode.json, out/beam_decode.json
    dfc run out/beam_decode.json --input "source=[3,1,4]" --json
"""
import numpy as np

import dfc

V, H = 6, 8                 # vocabulary (token 0 is EOS, token 1 starts decoding), hidden units
EOS, BOS = 0, 1
BEAM, MAX_LEN = 3, 12
_r = np.random.default_rng(7)
E_SRC = _r.normal(size=(V, H)) * 0.8
E = _r.normal(size=(V, H)) * 0.8
W = _r.normal(size=(H, H)) / np.sqrt(H)
U = _r.normal(size=(H, V))
U[:, EOS] += 0.3            # make ending somewhat likely, so decoding stops before MAX_LEN
FINISHED_LOGP = np.where(np.arange(V) == EOS, 0.0, -np.inf)   # a finished beam: EOS again, for free


def encode(source):
    return dfc.tanh(dfc.reduce_sum(dfc.gather(E_SRC, source), axis=0))


def step(tokens, h):
    """One decoder step for a batch of beams: new states [K, H] and log-probabilities [K, V]."""
    h = dfc.tanh(dfc.gather(E, tokens) + h @ W)
    return h, dfc.log_softmax(h @ U)


@dfc.function(input_signature=[dfc.TensorSpec([None], "int64")])
def greedy_decode(source):
    """The most likely token at every step, up to and including EOS (at most MAX_LEN tokens)."""
    h = dfc.reshape(encode(source), [1, H])
    token = dfc.constant([BOS], "int64")
    out = dfc.TensorArray("int64")
    t = 0
    while t < MAX_LEN:
        h, logp = step(token, h)
        token = dfc.argmax(logp, axis=-1)
        out = out.write(t, token[0])
        t += 1
        if token[0] == EOS:
            break
    return out.stack()


def top_k_indices(x, k):
    """Indices of the k largest entries of the vector x, largest first (ties: lowest index first)."""
    picked = []
    for _ in range(k):                  # k is a Python int: unrolled
        i = dfc.argmax(x, axis=0)
        picked.append(i)
        x = dfc.where(dfc.one_hot(i, V * BEAM) > 0, -np.inf, x)
    return dfc.stack(picked)


def gather_tree(token_ta, parent_ta, length):
    """Follow the parent pointers from the last step back to the first: the tokens of each beam [BEAM, length]."""
    beams = dfc.range(BEAM, dtype="int64")
    out = dfc.TensorArray("int64")
    t = length - 1
    while t >= 0:
        out = out.write(t, dfc.gather(token_ta.read(t), beams))
        beams = dfc.gather(parent_ta.read(t), beams)
        t -= 1
    return dfc.transpose(out.stack())


@dfc.function(input_signature=[dfc.TensorSpec([None], "int64")])
def beam_decode(source):
    """The BEAM best outputs (best first, each padded with EOS), their log-probabilities, and the steps run."""
    h = dfc.broadcast_to(encode(source), [BEAM, H])
    tokens = dfc.constant([BOS] * BEAM, "int64")
    scores = dfc.constant([0.0] + [-np.inf] * (BEAM - 1), "float64")   # at first only one beam is real
    finished = dfc.constant([False] * BEAM)
    token_ta, parent_ta = dfc.TensorArray("int64"), dfc.TensorArray("int64")
    t = 0
    while t < MAX_LEN and not dfc.reduce_all(finished):
        h, logp = step(tokens, h)
        logp = dfc.where(finished[:, None], FINISHED_LOGP, logp)
        candidates = dfc.reshape(scores[:, None] + logp, [-1])        # BEAM * V extensions
        best = top_k_indices(candidates, BEAM)
        parents, tokens = best // V, best % V
        scores = dfc.gather(candidates, best)
        h = dfc.gather(h, parents)
        finished = dfc.gather(finished, parents) | (tokens == EOS)
        token_ta = token_ta.write(t, tokens)
        parent_ta = parent_ta.write(t, parents)
        t += 1
    return gather_tree(token_ta, parent_ta, t), scores, t


# ---------------------------------------------------------------- plain numpy reference


def _np_step(tokens, h):
    h = np.tanh(E[tokens] + h @ W)
    z = h @ U
    z = z - z.max(-1, keepdims=True)
    return h, z - np.log(np.exp(z).sum(-1, keepdims=True))


def greedy_numpy(source):
    h, token, out = np.tanh(E_SRC[source].sum(0))[None], np.array([BOS]), []
    while len(out) < MAX_LEN:
        h, logp = _np_step(token, h)
        token = logp.argmax(-1)
        out.append(int(token[0]))
        if token[0] == EOS:
            break
    return out


def beam_numpy(source):
    h = np.repeat(np.tanh(E_SRC[source].sum(0))[None], BEAM, 0)
    beams = [[] for _ in range(BEAM)]
    tokens, scores = np.full(BEAM, BOS), np.array([0.0] + [-np.inf] * (BEAM - 1))
    finished = np.zeros(BEAM, bool)
    while len(beams[0]) < MAX_LEN and not finished.all():
        h, logp = _np_step(tokens, h)
        logp[finished] = FINISHED_LOGP
        candidates = (scores[:, None] + logp).reshape(-1)
        best = np.argsort(-candidates, kind="stable")[:BEAM]
        parents, tokens = best // V, best % V
        scores, h, finished = candidates[best], h[parents], finished[parents] | (tokens == EOS)
        beams = [beams[p] + [int(tok)] for p, tok in zip(parents, tokens)]
    return beams, scores


def until_eos(tokens):
    return tokens[:tokens.index(EOS) + 1] if EOS in tokens else tokens


def main():
    for source in ([3, 1, 4], [2, 5], [5, 5, 2, 3]):
        src = np.array(source, np.int64)
        greedy = greedy_decode(src).tolist()
        assert greedy == greedy_numpy(src)
        beams, scores, steps = beam_decode(src)
        want_beams, want_scores = beam_numpy(src)
        assert beams.tolist() == want_beams and np.allclose(scores, want_scores)
        print(f"source {source}: greedy {greedy}; beam search stopped after {int(steps)} of {MAX_LEN} steps: "
              + ", ".join(f"{until_eos(b)} (log p {s:.2f})" for b, s in zip(beams.tolist(), scores))
              + " -- same as numpy")


if __name__ == "__main__":
    main()
