"""Binary TreeLSTM (Tai et al. 2015) over one parse tree encoded as arrays (left child, right child,
word; -1 where none), evaluated in post-order by an explicit stack: pop a node; a leaf computes its
state from its word, an internal node seen the first time pushes itself back (expanded) above its
two children, seen the second time combines them. A classifier on the root; the training step returns
the loss and the gradients of the 6 weights. float32.

JAX: the same stack machine as a lax.scan over the exact number of pops (3 per internal node is 2,
1 per leaf: 3L-2 for L leaves), a lax.switch per pop and the stack and node states in buffers (reverse
mode refuses a while_loop). numpy: the loss (no hand-written adjoint; gradients checked against JAX).
"""
import numpy as np

import dfc

SIZES = {"bench": dict(L=32, V=50, E=32, H=32, C=5), "tiny": dict(L=4, V=6, E=3, H=4, C=3)}


def leaf_cell(x, W_leaf, b_leaf):
    i, o, u = dfc.split(dfc.matmul(x[None, :], W_leaf)[0] + b_leaf, 3)
    c = dfc.sigmoid(i) * dfc.tanh(u)
    return dfc.sigmoid(o) * dfc.tanh(c), c


def combine_cell(h_left, c_left, h_right, c_right, U, b):
    z = dfc.matmul(dfc.concat([h_left, h_right], 0)[None, :], U)[0] + b
    i, f_left, f_right, o, u = dfc.split(z, 5)
    c = dfc.sigmoid(i) * dfc.tanh(u) + dfc.sigmoid(f_left) * c_left + dfc.sigmoid(f_right) * c_right
    return dfc.sigmoid(o) * dfc.tanh(c), c


@dfc.function
def tree_lstm_step(left, right, word, label, emb, W_leaf, b_leaf, U, b, W_out):
    n_nodes = dfc.shape(left)[0]
    root = n_nodes - 1
    h_all = dfc.TensorArray("float32", size=n_nodes)
    c_all = dfc.TensorArray("float32", size=n_nodes)
    stack = [root]
    expanded = [False]
    while len(stack) > 0:
        node = stack.pop()
        ready = expanded.pop()
        if left[node] < 0:
            h, c = leaf_cell(emb[word[node]], W_leaf, b_leaf)
            h_all = h_all.write(node, h)
            c_all = c_all.write(node, c)
        elif ready:
            l, r = left[node], right[node]
            h, c = combine_cell(h_all.read(l), c_all.read(l), h_all.read(r), c_all.read(r), U, b)
            h_all = h_all.write(node, h)
            c_all = c_all.write(node, c)
        else:
            stack.append(node)
            expanded.append(True)
            stack.append(right[node])
            expanded.append(False)
            stack.append(left[node])
            expanded.append(False)
    logits = dfc.matmul(h_all.read(root)[None, :], W_out)[0]
    loss = -dfc.log_softmax(logits)[label]
    return loss, dfc.gradients(loss, [emb, W_leaf, b_leaf, U, b, W_out])


@dfc.function
def tree_lstm_step_tensor_stack(left, right, word, label, emb, W_leaf, b_leaf, U, b, W_out):
    """The same program after dfc refused the Python-list stack above (lists pushed in one branch of a
    tensor `if` only): the stack is a tensor of node ids with a stack pointer."""
    n_nodes = dfc.shape(left)[0]
    root = n_nodes - 1
    h_all = dfc.TensorArray("float32", size=n_nodes)
    c_all = dfc.TensorArray("float32", size=n_nodes)
    slots = dfc.arange(n_nodes + 2)
    stack = dfc.where(slots == 0, root, 0)
    expanded = dfc.zeros([n_nodes + 2], dtype="bool")
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack[sp]
        if left[node] < 0:
            h, c = leaf_cell(emb[word[node]], W_leaf, b_leaf)
            h_all = h_all.write(node, h)
            c_all = c_all.write(node, c)
        elif expanded[sp]:
            l, r = left[node], right[node]
            h, c = combine_cell(h_all.read(l), c_all.read(l), h_all.read(r), c_all.read(r), U, b)
            h_all = h_all.write(node, h)
            c_all = c_all.write(node, c)
        else:
            stack = dfc.where(slots == sp, node, dfc.where(slots == sp + 1, right[node],
                                                          dfc.where(slots == sp + 2, left[node], stack)))
            expanded = dfc.where(slots == sp, True, dfc.where((slots == sp + 1) | (slots == sp + 2), False, expanded))
            sp += 3
    logits = dfc.matmul(h_all.read(root)[None, :], W_out)[0]
    loss = -dfc.log_softmax(logits)[label]
    return loss, dfc.gradients(loss, [emb, W_leaf, b_leaf, U, b, W_out])


def random_tree(L, V, rng):
    """A random binary parse tree over L words: adjacent spans merged at random; the root is the last node."""
    left, right, word = [-1] * L, [-1] * L, list(rng.integers(0, V, L))
    spans = list(range(L))
    while len(spans) > 1:
        k = int(rng.integers(0, len(spans) - 1))
        left.append(spans[k])
        right.append(spans[k + 1])
        word.append(-1)
        spans[k:k + 2] = [len(left) - 1]
    return np.array(left, np.int64), np.array(right, np.int64), np.array(word, np.int64)


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    L, V, E, H, C = cfg["L"], cfg["V"], cfg["E"], cfg["H"], cfg["C"]
    f = np.float32
    left, right, word = random_tree(L, V, rng)
    return (left, right, word, np.int64(rng.integers(0, C)), rng.standard_normal((V, E)).astype(f),
            (rng.standard_normal((E, 3 * H)) / np.sqrt(E)).astype(f), np.zeros(3 * H, f),
            (rng.standard_normal((2 * H, 5 * H)) / np.sqrt(2 * H)).astype(f), np.zeros(5 * H, f),
            (rng.standard_normal((H, C)) / np.sqrt(H)).astype(f))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_loss(left, right, word, label, emb, W_leaf, b_leaf, U, b, W_out):
    n = len(left)
    h_all, c_all = [None] * n, [None] * n
    stack = [(n - 1, False)]
    while stack:
        node, ready = stack.pop()
        if left[node] < 0:
            i, o, u = np.split(emb[word[node]] @ W_leaf + b_leaf, 3)
            c_all[node] = _sigmoid(i) * np.tanh(u)
            h_all[node] = _sigmoid(o) * np.tanh(c_all[node])
        elif ready:
            l, r = left[node], right[node]
            i, fl, fr, o, u = np.split(np.concatenate([h_all[l], h_all[r]]) @ U + b, 5)
            c_all[node] = _sigmoid(i) * np.tanh(u) + _sigmoid(fl) * c_all[l] + _sigmoid(fr) * c_all[r]
            h_all[node] = _sigmoid(o) * np.tanh(c_all[node])
        else:
            stack += [(node, True), (right[node], False), (left[node], False)]
    z = h_all[n - 1] @ W_out
    z = z - z.max()
    return np.float32(-(z[label] - np.log(np.exp(z).sum())))


def _jax():
    import jax
    import jax.numpy as jnp

    def loss(params, left, right, word, label):
        emb, W_leaf, b_leaf, U, b, W_out = params
        n = left.shape[0]
        H = U.shape[0] // 2
        sig = jax.nn.sigmoid

        def pop(carry, _):
            stack, flags, sp, h_all, c_all = carry
            node, ready = stack[sp - 1], flags[sp - 1]
            sp = sp - 1

            def leaf(a):
                stack, flags, sp, h_all, c_all = a
                i, o, u = jnp.split(emb[word[node]] @ W_leaf + b_leaf, 3)
                c = sig(i) * jnp.tanh(u)
                return stack, flags, sp, h_all.at[node].set(sig(o) * jnp.tanh(c)), c_all.at[node].set(c)

            def combine(a):
                stack, flags, sp, h_all, c_all = a
                l, r = left[node], right[node]
                i, fl, fr, o, u = jnp.split(jnp.concatenate([h_all[l], h_all[r]]) @ U + b, 5)
                c = sig(i) * jnp.tanh(u) + sig(fl) * c_all[l] + sig(fr) * c_all[r]
                return stack, flags, sp, h_all.at[node].set(sig(o) * jnp.tanh(c)), c_all.at[node].set(c)

            def expand(a):
                stack, flags, sp, h_all, c_all = a
                stack = stack.at[sp].set(node).at[sp + 1].set(right[node]).at[sp + 2].set(left[node])
                flags = flags.at[sp].set(True).at[sp + 1].set(False).at[sp + 2].set(False)
                return stack, flags, sp + 3, h_all, c_all
            branch = jnp.where(left[node] < 0, 0, jnp.where(ready, 1, 2))
            return jax.lax.switch(branch, (leaf, combine, expand), (stack, flags, sp, h_all, c_all)), None
        init = (jnp.zeros(n + 2, jnp.int32).at[0].set(n - 1), jnp.zeros(n + 2, bool), jnp.int32(1),
                jnp.zeros((n, H), jnp.float32), jnp.zeros((n, H), jnp.float32))
        n_leaves = (n + 1) // 2
        (_, _, _, h_all, _), _ = jax.lax.scan(pop, init, None, length=3 * n_leaves - 2)
        return -jax.nn.log_softmax(h_all[n - 1] @ W_out)[label]
    return jax, jax.jit(jax.value_and_grad(loss))


def _torch():
    import torch

    def step(left, right, word, label, *params):
        ps = [p.detach().requires_grad_(True) for p in params]
        emb, W_leaf, b_leaf, U, b, W_out = ps
        n = len(left)
        h_all, c_all = [None] * n, [None] * n
        stack = [(n - 1, False)]
        while stack:
            node, ready = stack.pop()
            if left[node] < 0:
                i, o, u = torch.chunk(emb[word[node]] @ W_leaf + b_leaf, 3)
                c_all[node] = torch.sigmoid(i) * torch.tanh(u)
                h_all[node] = torch.sigmoid(o) * torch.tanh(c_all[node])
            elif ready:
                l, r = left[node], right[node]
                i, fl, fr, o, u = torch.chunk(torch.cat([h_all[l], h_all[r]]) @ U + b, 5)
                c_all[node] = (torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * c_all[l]
                               + torch.sigmoid(fr) * c_all[r])
                h_all[node] = torch.sigmoid(o) * torch.tanh(c_all[node])
            else:
                stack += [(node, True), (right[node], False), (left[node], False)]
        loss = -torch.log_softmax(h_all[n - 1] @ W_out, 0)[label]
        return loss.detach().numpy(), [g.numpy() for g in torch.autograd.grad(loss, ps)]
    return torch, step


def cases(size="bench"):
    from benchmarks.research.case import Case
    a = inputs(size)
    tree, params = a[:4], a[4:]

    def jax_step():
        jax, f = _jax()

        def run():
            loss, grads = jax.block_until_ready(f(list(params), *tree))
            return np.asarray(loss), [np.asarray(g) for g in grads]
        return run

    def torch_step():
        torch, f = _torch()
        t = [list(map(int, tree[0])), list(map(int, tree[1])), list(map(int, tree[2])), int(tree[3])]
        p = [torch.from_numpy(v) for v in params]
        return lambda: f(*t, *p)

    def check(fn):
        def run():
            loss, grads = fn(*a)
            out = [("dfc loss vs numpy", numpy_loss(*a), loss)]
            try:
                out.append(("dfc gradients vs JAX", jax_step()()[1], grads))
            except ImportError:
                pass
            return out
        return run

    cfg = SIZES[size]
    desc = (f"TreeLSTM training step over a random binary tree of {cfg['L']} words ({2 * cfg['L'] - 1} nodes) "
            f"by an explicit stack, E={cfg['E']} H={cfg['H']}, float32")
    common = dict(numpy=lambda: numpy_loss(*a), jax=jax_step, torch=torch_step, rtol=2e-4, atol=1e-6,
                  numpy_note="forward loss only (no hand-written adjoint)",
                  jax_note="the stack machine as lax.scan over the 3L-2 pops + lax.switch (reverse mode refuses "
                           "while_loop)")
    return [Case("tree_lstm", desc + "; the stack a Python list (append/pop)", dfc_call=lambda: tree_lstm_step(*a),
                 check=check(tree_lstm_step), **common),
            Case("tree_lstm_tensor_stack", desc + "; the stack a tensor with a pointer (written after dfc refused "
                 "the list)", dfc_call=lambda: tree_lstm_step_tensor_stack(*a),
                 check=check(tree_lstm_step_tensor_stack), **common)]
