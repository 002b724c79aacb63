"""Bootstrap particle filter with ESS-triggered systematic resampling, float64, on the classic nonlinear
growth model: x_t = x/2 + 25x/(1+x^2) + 8cos(1.2t) + v, y_t = x^2/20 + w. Returns the log-likelihood
estimate and the filtered means. Every random number is drawn inside the program (initial particles,
process noise each step, the resampling offset when the ESS falls below N/2).

Resampling: the position u+i/N falls in the cumulative weights where searchsorted puts it, in every
version. (Until dfc had searchsorted, its version counted `sum(cdf[None, :] < pos[:, None], 1)`, an N x N
comparison: the same indices, at N^2 cost.)

Checking: the same program with `record=True` also returns the draws it made; numpy replays them and
must give the same numbers (JAX replays them too). The timed versions draw their own numbers.
"""
import numpy as np

import dfc

SIZES = {"bench": dict(T=100, N=512), "tiny": dict(T=12, N=32)}
Q, R = 10.0, 1.0


def transition(x, t):
    return 0.5 * x + 25.0 * x / (1.0 + x * x) + 8.0 * dfc.cos(1.2 * t)


@dfc.function
def particle_filter(ys, n_particles, record=False):
    N = n_particles
    T = dfc.shape(ys)[0]
    x = dfc.random_normal([N], dtype="float64") * np.sqrt(5.0)
    x_first = x
    logw = dfc.full([N], -np.log(N), dtype="float64")
    loglik = dfc.constant(0.0, "float64")
    means = dfc.TensorArray("float64", size=T)
    noise = dfc.TensorArray("float64", size=T)
    offsets = dfc.TensorArray("float64", size=T)
    for t in range(T):
        v = dfc.random_normal([N], dtype="float64") * np.sqrt(Q)
        x = transition(x, dfc.cast(t + 1, "float64")) + v
        logw = logw - 0.5 * (ys[t] - x * x / 20.0) ** 2 / R - 0.5 * np.log(2 * np.pi * R)
        m = dfc.reduce_max(logw)
        lse = m + dfc.log(dfc.reduce_sum(dfc.exp(logw - m)))
        loglik = loglik + lse
        logw = logw - lse
        w = dfc.exp(logw)
        means = means.write(t, dfc.reduce_sum(w * x))
        u_used = dfc.constant(-1.0, "float64")
        ess = 1.0 / dfc.reduce_sum(w * w)
        if ess < N / 2:
            u = dfc.random_uniform([], dtype="float64")
            positions = (dfc.arange(N, dtype="float64") + u) / N
            cdf = dfc.cumsum(w)
            idx = dfc.searchsorted(cdf, positions)
            idx = dfc.minimum(idx, N - 1)
            x = dfc.gather(x, idx)
            logw = dfc.full([N], -np.log(N), dtype="float64")
            u_used = u
        if record:
            noise = noise.write(t, v)
            offsets = offsets.write(t, u_used)
    if record:
        return loglik, means.stack(), x_first, noise.stack(), offsets.stack()
    return loglik, means.stack()


def simulate(T, seed=0):
    rng = np.random.default_rng(seed)
    x, ys = rng.standard_normal() * np.sqrt(5.0), np.empty(T)
    for t in range(T):
        x = 0.5 * x + 25 * x / (1 + x * x) + 8 * np.cos(1.2 * (t + 1)) + rng.standard_normal() * np.sqrt(Q)
        ys[t] = x * x / 20 + rng.standard_normal() * np.sqrt(R)
    return ys


def inputs(size="bench"):
    cfg = SIZES[size]
    return simulate(cfg["T"]), cfg["N"]


class RngDraws:
    """Fresh numbers from numpy's generator (the timed numpy version)."""

    def __init__(self, N, seed=1):
        self.rng, self.N = np.random.default_rng(seed), N

    def first(self):
        return self.rng.standard_normal(self.N) * np.sqrt(5.0)

    def noise(self, t):
        return self.rng.standard_normal(self.N) * np.sqrt(Q)

    def offset(self, t):
        return self.rng.uniform()


class Replay:
    """The numbers a recorded dfc run drew."""

    def __init__(self, x_first, noise, offsets):
        self.x_first, self.v, self.u = x_first, noise, offsets

    def first(self):
        return self.x_first

    def noise(self, t):
        return self.v[t]

    def offset(self, t):
        return self.u[t]


def numpy_pf(ys, N, draws):
    x = draws.first()
    logw = np.full(N, -np.log(N))
    loglik, means = 0.0, np.empty(len(ys))
    for t in range(len(ys)):
        x = 0.5 * x + 25 * x / (1 + x * x) + 8 * np.cos(1.2 * (t + 1)) + draws.noise(t)
        logw = logw - 0.5 * (ys[t] - x * x / 20) ** 2 / R - 0.5 * np.log(2 * np.pi * R)
        m = logw.max()
        lse = m + np.log(np.sum(np.exp(logw - m)))
        loglik += lse
        logw = logw - lse
        w = np.exp(logw)
        means[t] = np.sum(w * x)
        if 1.0 / np.sum(w * w) < N / 2:
            positions = (np.arange(N) + draws.offset(t)) / N
            idx = np.minimum(np.searchsorted(np.cumsum(w), positions, side="left"), N - 1)
            x = x[idx]
            logw = np.full(N, -np.log(N))
    return loglik, means


def jax_pf(N, replay=False):
    """jit-compiled filter; draws from jax.random (or, replay=True, from arrays passed in)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def run(ys, key, x_first=None, noise=None, offsets=None):
        k0, kloop = jax.random.split(key)
        x = x_first if replay else jax.random.normal(k0, (N,), jnp.float64) * np.sqrt(5.0)

        def step(carry, inp):
            x, logw, loglik = carry
            t, y = inp
            kt = jax.random.fold_in(kloop, t)
            kv, ku = jax.random.split(kt)
            v = noise[t] if replay else jax.random.normal(kv, (N,), jnp.float64) * np.sqrt(Q)
            x = 0.5 * x + 25 * x / (1 + x * x) + 8 * jnp.cos(1.2 * (t + 1)) + v
            logw = logw - 0.5 * (y - x * x / 20) ** 2 / R - 0.5 * np.log(2 * np.pi * R)
            lse = jax.scipy.special.logsumexp(logw)
            logw = logw - lse
            w = jnp.exp(logw)
            mean = jnp.sum(w * x)

            def resample(x, logw):
                u = offsets[t] if replay else jax.random.uniform(ku, (), jnp.float64)
                idx = jnp.minimum(jnp.searchsorted(jnp.cumsum(w), (jnp.arange(N) + u) / N, side="left"), N - 1)
                return x[idx], jnp.full(N, -np.log(N))
            x, logw = jax.lax.cond(1.0 / jnp.sum(w * w) < N / 2, resample, lambda x, logw: (x, logw), x, logw)
            return (x, logw, loglik + lse), mean
        (_, _, loglik), means = jax.lax.scan(step, (x, jnp.full(N, -np.log(N)), jnp.float64(0.0)),
                                             (jnp.arange(ys.shape[0]), ys))
        return loglik, means
    f = jax.jit(run)
    key = jax.random.PRNGKey(0)
    if replay:
        return lambda ys, *rec: [np.asarray(v) for v in jax.block_until_ready(f(ys, key, *rec))]
    return lambda ys: [np.asarray(v) for v in jax.block_until_ready(f(ys, key))]


def torch_pf(N):
    import torch
    torch.manual_seed(0)

    def run(ys):
        ys = torch.from_numpy(ys)
        x = torch.randn(N, dtype=torch.float64) * np.sqrt(5.0)
        logw = torch.full((N,), -np.log(N), dtype=torch.float64)
        loglik, means = torch.zeros((), dtype=torch.float64), []
        for t in range(len(ys)):
            x = 0.5 * x + 25 * x / (1 + x * x) + 8 * np.cos(1.2 * (t + 1)) + torch.randn(N, dtype=torch.float64) * np.sqrt(Q)
            logw = logw - 0.5 * (ys[t] - x * x / 20) ** 2 / R - 0.5 * np.log(2 * np.pi * R)
            lse = torch.logsumexp(logw, 0)
            loglik = loglik + lse
            logw = logw - lse
            w = torch.exp(logw)
            means.append(torch.sum(w * x))
            if 1.0 / torch.sum(w * w) < N / 2:
                positions = (torch.arange(N, dtype=torch.float64) + torch.rand((), dtype=torch.float64)) / N
                idx = torch.clamp(torch.searchsorted(torch.cumsum(w, 0), positions), max=N - 1)
                x = x[idx]
                logw = torch.full((N,), -np.log(N), dtype=torch.float64)
        return loglik.numpy(), torch.stack(means).numpy()
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    ys, N = inputs(size)

    def check():
        loglik, means, x_first, noise, offsets = particle_filter(ys, N, True)
        ref = numpy_pf(ys, N, Replay(x_first, noise, offsets))
        out = [("dfc vs numpy (dfc's draws replayed)", ref, (loglik, means))]
        try:
            out.append(("JAX vs numpy (dfc's draws replayed)", ref, jax_pf(N, replay=True)(ys, x_first, noise, offsets)))
        except ImportError:
            pass
        return out

    return [Case("particle_filter", f"bootstrap PF, T={len(ys)} N={N}, ESS<N/2 -> systematic resampling, float64",
                 dfc_call=lambda: particle_filter(ys, N), numpy=lambda: numpy_pf(ys, N, RngDraws(N)),
                 jax=lambda: (lambda f: lambda: f(ys))(jax_pf(N)), torch=lambda: (lambda f: lambda: f(ys))(torch_pf(N)),
                 check=check, rtol=1e-9, atol=1e-9,
                 note="each system draws its own numbers; checked by replaying dfc's draws")]
