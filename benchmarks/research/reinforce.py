"""REINFORCE on CartPole written with tensors, float64: a linear softmax policy (4 -> 2); each episode
starts from a state drawn uniformly in [-0.05, 0.05]^4 and runs until the pole falls (|x| > 2.4 or
|theta| > 12 degrees) or max_steps, each action drawn from the policy inside the program. The loss is
-sum_t log pi(a_t | s_t) * (reward to go); the step returns the mean loss over the episodes, their
lengths, and the policy gradient.

JAX: reverse mode refuses the episode's while_loop, so its episode is a lax.scan over max_steps with a
`done` mask (the closest equivalent; it computes every step to max_steps). numpy: the same gradient
by hand (d log softmax / d logits = onehot(a) - p). Checked by replaying dfc's draws.
"""
import numpy as np

import dfc

SIZES = {"bench": dict(episodes=8, max_steps=200), "tiny": dict(episodes=2, max_steps=30)}
GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_LIMIT, X_LIMIT = 12 * 2 * np.pi / 360, 2.4


def cartpole_step(state, action):
    x, x_dot, theta, theta_dot = state[0], state[1], state[2], state[3]
    force = dfc.where(action == 1, FORCE, -FORCE)
    cos, sin = dfc.cos(theta), dfc.sin(theta)
    total_mass = CART_MASS + POLE_MASS
    temp = (force + POLE_MASS * HALF_LENGTH * theta_dot ** 2 * sin) / total_mass
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos ** 2 / total_mass))
    x_acc = temp - POLE_MASS * HALF_LENGTH * theta_acc * cos / total_mass
    return dfc.stack([x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc])


@dfc.function
def reinforce_step(W, b, n_episodes, max_steps, record=False):
    total_loss = 0.0
    lengths = dfc.TensorArray("int64", size=n_episodes)
    draws = dfc.TensorArray("float64", size=0)          # grows
    k = 0
    for e in range(n_episodes):
        state = dfc.random_uniform([4], -0.05, 0.05, dtype="float64")
        if record:
            for j in range(4):
                draws = draws.write(k, state[j])
                k += 1
        log_probs = dfc.TensorArray("float64", size=0)
        t = 0
        done = False
        while not done and t < max_steps:
            p = dfc.softmax(dfc.matmul(state[None, :], W)[0] + b)
            u = dfc.random_uniform([], dtype="float64")
            action = dfc.cast(u < p[1], "int64")
            log_probs = log_probs.write(t, dfc.log(p[action]))
            state = cartpole_step(state, action)
            done = dfc.abs(state[0]) > X_LIMIT or dfc.abs(state[2]) > THETA_LIMIT
            t += 1
            if record:
                draws = draws.write(k, u)
                k += 1
        reward_to_go = dfc.cast(t - dfc.range(t), "float64")
        total_loss -= dfc.reduce_sum(log_probs.stack() * reward_to_go)
        lengths = lengths.write(e, t)
    loss = total_loss / dfc.cast(n_episodes, "float64")
    dW, db = dfc.gradients(loss, [W, b])
    if record:
        return loss, lengths.stack(), dW, db, draws.stack()
    return loss, lengths.stack(), dW, db


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 2)) * 0.5, np.zeros(2), np.int64(cfg["episodes"]), np.int64(cfg["max_steps"])


def numpy_cartpole(s, a):
    x, x_dot, theta, theta_dot = s
    force = FORCE if a == 1 else -FORCE
    cos, sin = np.cos(theta), np.sin(theta)
    total = CART_MASS + POLE_MASS
    temp = (force + POLE_MASS * HALF_LENGTH * theta_dot ** 2 * sin) / total
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos ** 2 / total))
    x_acc = temp - POLE_MASS * HALF_LENGTH * theta_acc * cos / total
    return np.array([x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc])


def numpy_reinforce(W, b, n_episodes, max_steps, draws=None):
    """draws: a flat array of dfc's draws to replay (initial state's 4, then one per step), else numpy's."""
    rng = np.random.default_rng(1)
    it = iter(draws) if draws is not None else None
    total, lengths, dW, db = 0.0, [], np.zeros_like(W), np.zeros_like(b)
    for _ in range(int(n_episodes)):
        s = np.array([next(it) for _ in range(4)]) if it else rng.uniform(-0.05, 0.05, 4)
        logps, grads, t, done = [], [], 0, False
        while not done and t < max_steps:
            z = s @ W + b
            p = np.exp(z - z.max())
            p /= p.sum()
            u = next(it) if it else rng.uniform()
            a = int(u < p[1])
            logps.append(np.log(p[a]))
            g = -p
            g[a] += 1.0                         # d log p[a] / d logits
            grads.append((np.outer(s, g), g))
            s = numpy_cartpole(s, a)
            done = abs(s[0]) > X_LIMIT or abs(s[2]) > THETA_LIMIT
            t += 1
        for j, (gW, gb) in enumerate(grads):
            total -= logps[j] * (t - j)
            dW -= gW * (t - j)
            db -= gb * (t - j)
        lengths.append(t)
    n = float(n_episodes)
    return total / n, np.array(lengths, np.int64), dW / n, db / n


def _jax(n_episodes, max_steps, replay=False):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def step_env(s, a):
        x, x_dot, theta, theta_dot = s
        force = jnp.where(a == 1, FORCE, -FORCE)
        cos, sin = jnp.cos(theta), jnp.sin(theta)
        total = CART_MASS + POLE_MASS
        temp = (force + POLE_MASS * HALF_LENGTH * theta_dot ** 2 * sin) / total
        theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos ** 2 / total))
        x_acc = temp - POLE_MASS * HALF_LENGTH * theta_acc * cos / total
        return jnp.stack([x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc])

    def episode_loss(W, b, key, replayed):
        s0 = replayed[:4] if replay else jax.random.uniform(key, (4,), jnp.float64, -0.05, 0.05)
        us = replayed[4:] if replay else jax.random.uniform(jax.random.fold_in(key, 1), (max_steps,), jnp.float64)

        def body(carry, u):
            s, done, t = carry
            p = jax.nn.softmax(s @ W + b)
            a = (u < p[1]).astype(jnp.int64)
            logp = jnp.where(done, 0.0, jnp.log(p[a]))
            s_next = step_env(s, a)
            alive = ~done
            fell = (jnp.abs(s_next[0]) > X_LIMIT) | (jnp.abs(s_next[2]) > THETA_LIMIT)
            return (jnp.where(alive, s_next, s), done | fell, t + alive.astype(jnp.int64)), logp
        (_, _, t), logps = jax.lax.scan(body, (s0, False, jnp.int64(0)), us)
        return -jnp.sum(logps * jnp.maximum(t - jnp.arange(max_steps), 0)), t

    def loss(W, b, key, replayed):
        keys = jax.random.split(key, n_episodes)
        per = [episode_loss(W, b, keys[e], replayed[e]) for e in range(n_episodes)]
        return sum(p[0] for p in per) / n_episodes, jnp.stack([p[1] for p in per])
    f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    key = jax.random.PRNGKey(0)

    def run(W, b, replayed=None):
        if replayed is None:
            replayed = jnp.zeros((n_episodes, max_steps + 4))
        (l, lengths), (dW, db) = jax.block_until_ready(f(W, b, key, replayed))
        return np.asarray(l), np.asarray(lengths), np.asarray(dW), np.asarray(db)
    return run


def _replay_matrix(draws, lengths, max_steps):
    """dfc's flat draws as one row per episode: 4 initial-state draws, then one per step (padded)."""
    rows, k = np.zeros((len(lengths), max_steps + 4)), 0
    for e, n in enumerate(lengths):
        rows[e, :4 + n] = draws[k:k + 4 + n]
        k += 4 + n
    return rows


def _torch(n_episodes, max_steps):
    import torch
    torch.manual_seed(0)

    def run(W, b):
        W, b = W.detach().requires_grad_(True), b.detach().requires_grad_(True)
        total, lengths = 0.0, []
        for _ in range(n_episodes):
            s = torch.rand(4, dtype=torch.float64) * 0.1 - 0.05
            logps, t, done = [], 0, False
            while not done and t < max_steps:
                p = torch.softmax(s @ W + b, 0)
                a = int(torch.rand((), dtype=torch.float64) < p[1])
                logps.append(torch.log(p[a]))
                x, x_dot, theta, theta_dot = s
                force = FORCE if a == 1 else -FORCE
                cos, sin = torch.cos(theta), torch.sin(theta)
                tm = CART_MASS + POLE_MASS
                temp = (force + POLE_MASS * HALF_LENGTH * theta_dot ** 2 * sin) / tm
                theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos ** 2 / tm))
                x_acc = temp - POLE_MASS * HALF_LENGTH * theta_acc * cos / tm
                s = torch.stack([x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc])
                done = bool(abs(s[0]) > X_LIMIT or abs(s[2]) > THETA_LIMIT)
                t += 1
            total = total - torch.sum(torch.stack(logps) * torch.arange(t, 0, -1, dtype=torch.float64))
            lengths.append(t)
        loss = total / n_episodes
        dW, db = torch.autograd.grad(loss, [W, b])
        return loss.detach().numpy(), np.array(lengths), dW.numpy(), db.numpy()
    return lambda W, b: run(torch.from_numpy(W), torch.from_numpy(b))


def cases(size="bench"):
    from benchmarks.research.case import Case
    W, b, E, S = inputs(size)

    def check():
        loss, lengths, dW, db, draws = reinforce_step(W, b, E, S, True)
        out = [("dfc vs numpy (dfc's draws replayed)", numpy_reinforce(W, b, E, S, draws), (loss, lengths, dW, db))]
        try:
            rows = _replay_matrix(draws, lengths, int(S))
            out.append(("JAX vs numpy (dfc's draws replayed)", numpy_reinforce(W, b, E, S, draws),
                        _jax(int(E), int(S), replay=True)(W, b, rows)))
        except ImportError:
            pass
        return out

    return [Case("reinforce", f"REINFORCE on CartPole, linear softmax policy, {int(E)} episodes until the pole "
                              f"falls (max {int(S)} steps), float64",
                 dfc_call=lambda: reinforce_step(W, b, E, S), numpy=lambda: numpy_reinforce(W, b, E, S),
                 jax=lambda: (lambda f: lambda: f(W, b))(_jax(int(E), int(S))),
                 torch=lambda: (lambda f: lambda: f(W, b))(_torch(int(E), int(S))),
                 check=check, rtol=1e-9, atol=1e-12,
                 note="each system draws its own numbers (episode lengths differ); checked by replaying dfc's draws",
                 jax_note=f"episodes as lax.scan over all {int(S)} steps with a done mask "
                          "(reverse mode refuses while_loop)")]
