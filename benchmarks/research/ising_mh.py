"""Metropolis-Hastings on a 2-D Ising model (periodic L x L lattice, J=1, no field), float64, forward:
n_steps single-spin-flip proposals (n_steps a tensor), each picking a site by a uniform draw and
accepting the flip with probability min(1, exp(-beta dE)) (an `if` on a tensor inside the loop); the
energy and magnetization are updated on acceptance. Returns the final lattice, the acceptance count and
the running means of the energy and |magnetization| per site.

Every random number is drawn inside the program (two per step: the site, the acceptance test). JAX:
lax.fori_loop with jax.random and `.at[].set` (forward only). Checked by replaying dfc's draws in numpy.
"""
import numpy as np

import dfc

SIZES = {"bench": dict(L=16, steps=4000), "tiny": dict(L=4, steps=40)}


@dfc.function
def ising_mh(spins, beta, n_steps, record=False):
    L = dfc.shape(spins)[0]
    rows = dfc.arange(L)[:, None]
    cols = dfc.arange(L)[None, :]
    energy = -dfc.reduce_sum(spins * (dfc.roll(spins, 1, axis=0) + dfc.roll(spins, 1, axis=1)))
    mag = dfc.reduce_sum(spins)
    accepted = 0
    energy_sum = dfc.constant(0.0, "float64")
    abs_mag_sum = dfc.constant(0.0, "float64")
    draws = dfc.TensorArray("float64", size=0)
    for step in range(n_steps):
        site = dfc.cast(dfc.random_uniform([], dtype="float64") * dfc.cast(L * L, "float64"), "int64")
        u = dfc.random_uniform([], dtype="float64")
        i, j = site // L, site % L
        s = spins[i, j]
        dE = 2.0 * s * (spins[(i + 1) % L, j] + spins[(i - 1) % L, j] + spins[i, (j + 1) % L] + spins[i, (j - 1) % L])
        if u < dfc.exp(-beta * dE):
            spins = dfc.where((rows == i) & (cols == j), -spins, spins)       # spins[i, j] = -s is refused
            energy += dE
            mag -= 2.0 * s
            accepted += 1
        energy_sum += energy
        abs_mag_sum += dfc.abs(mag)
        if record:
            draws = draws.write(2 * step, dfc.cast(site, "float64"))
            draws = draws.write(2 * step + 1, u)
    per_site = dfc.cast(n_steps * L * L, "float64")
    out = (spins, accepted, energy_sum / per_site, abs_mag_sum / per_site)
    if record:
        return out + (draws.stack(),)
    return out


def inputs(size="bench", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    return (rng.choice([-1.0, 1.0], (cfg["L"], cfg["L"])), np.float64(0.44), np.int64(cfg["steps"]))


class RngDraws:
    def __init__(self, seed=1):
        self.rng = np.random.default_rng(seed)

    def site(self, step, n_sites):
        return int(self.rng.uniform() * n_sites)

    def u(self, step):
        return self.rng.uniform()


class Replay:
    def __init__(self, draws):
        self.d = draws

    def site(self, step, n_sites):
        return int(self.d[2 * step])

    def u(self, step):
        return self.d[2 * step + 1]


def numpy_ising(spins, beta, n_steps, draws=None):
    draws = draws or RngDraws()
    spins = spins.copy()
    L = spins.shape[0]
    energy = -np.sum(spins * (np.roll(spins, 1, 0) + np.roll(spins, 1, 1)))
    mag, accepted, e_sum, m_sum = spins.sum(), 0, 0.0, 0.0
    for step in range(int(n_steps)):
        i, j = divmod(draws.site(step, L * L), L)
        u = draws.u(step)
        s = spins[i, j]
        dE = 2.0 * s * (spins[(i + 1) % L, j] + spins[(i - 1) % L, j] + spins[i, (j + 1) % L] + spins[i, (j - 1) % L])
        if u < np.exp(-beta * dE):
            spins[i, j] = -s
            energy, mag, accepted = energy + dE, mag - 2 * s, accepted + 1
        e_sum += energy
        m_sum += abs(mag)
    n = int(n_steps) * L * L
    return spins, np.int64(accepted), e_sum / n, m_sum / n


def _jax(replay=False):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def run(spins, beta, n_steps, key, draws=None):
        L = spins.shape[0]
        energy = -jnp.sum(spins * (jnp.roll(spins, 1, 0) + jnp.roll(spins, 1, 1)))

        def body(step, c):
            spins, energy, mag, accepted, e_sum, m_sum = c
            if replay:
                site, u = draws[2 * step].astype(jnp.int64), draws[2 * step + 1]
            else:
                k1, k2 = jax.random.split(jax.random.fold_in(key, step))
                site = (jax.random.uniform(k1, (), jnp.float64) * (L * L)).astype(jnp.int64)
                u = jax.random.uniform(k2, (), jnp.float64)
            i, j = site // L, site % L
            s = spins[i, j]
            dE = 2.0 * s * (spins[(i + 1) % L, j] + spins[(i - 1) % L, j] + spins[i, (j + 1) % L]
                            + spins[i, (j - 1) % L])
            acc = u < jnp.exp(-beta * dE)
            spins = jnp.where(acc, spins.at[i, j].set(-s), spins)
            energy = jnp.where(acc, energy + dE, energy)
            mag = jnp.where(acc, mag - 2 * s, mag)
            return spins, energy, mag, accepted + acc, e_sum + energy, m_sum + jnp.abs(mag)
        init = (spins, energy, jnp.sum(spins), jnp.int64(0), jnp.float64(0), jnp.float64(0))
        spins, _, _, accepted, e_sum, m_sum = jax.lax.fori_loop(0, n_steps, body, init)
        n = n_steps * L * L
        return spins, accepted, e_sum / n, m_sum / n
    f = jax.jit(run)
    key = jax.random.PRNGKey(0)
    return lambda spins, beta, n, draws=None: tuple(np.asarray(v) for v in jax.block_until_ready(
        f(spins, beta, n, key, draws)))


def _torch():
    import torch
    torch.manual_seed(0)

    def run(spins, beta, n_steps):
        spins = torch.from_numpy(spins).clone()
        L = spins.shape[0]
        energy = -torch.sum(spins * (torch.roll(spins, 1, 0) + torch.roll(spins, 1, 1)))
        mag, accepted = spins.sum(), 0
        e_sum = m_sum = torch.zeros((), dtype=torch.float64)
        for _ in range(int(n_steps)):
            site = int(torch.rand((), dtype=torch.float64) * (L * L))
            u = torch.rand((), dtype=torch.float64)
            i, j = divmod(site, L)
            s = spins[i, j].clone()
            dE = 2.0 * s * (spins[(i + 1) % L, j] + spins[(i - 1) % L, j] + spins[i, (j + 1) % L]
                            + spins[i, (j - 1) % L])
            if u < torch.exp(-beta * dE):
                spins[i, j] = -s
                energy, mag, accepted = energy + dE, mag - 2 * s, accepted + 1
            e_sum = e_sum + energy
            m_sum = m_sum + torch.abs(mag)
        n = int(n_steps) * L * L
        return spins.numpy(), np.int64(accepted), (e_sum / n).numpy(), (m_sum / n).numpy()
    return run


def cases(size="bench"):
    from benchmarks.research.case import Case
    a = inputs(size)

    def check():
        *got, draws = ising_mh(*a, True)
        ref = numpy_ising(*a, Replay(draws))
        out = [("dfc vs numpy (dfc's draws replayed)", ref, tuple(got))]
        try:
            out.append(("JAX vs numpy (dfc's draws replayed)", ref, _jax(replay=True)(*a, draws)))
        except ImportError:
            pass
        return out

    cfg = SIZES[size]
    return [Case("ising_mh", f"Metropolis-Hastings on a {cfg['L']}x{cfg['L']} Ising lattice at beta=0.44, "
                             f"{cfg['steps']} single-flip steps (a tensor), accept/reject `if`, float64, forward",
                 dfc_call=lambda: ising_mh(*a), numpy=lambda: numpy_ising(*a),
                 jax=lambda: (lambda f: lambda: f(*a))(_jax()), torch=lambda: (lambda f: lambda: f(*a))(_torch()),
                 check=check, rtol=1e-12, atol=1e-12,
                 note="each system draws its own numbers; checked by replaying dfc's draws; the flip is a "
                      "dfc.where over the lattice: the natural `spins[i, j] = -s` is refused (DfcTypeError: "
                      "symbolic tensor does not support item assignment)",
                 jax_note="lax.fori_loop with jax.random and .at[].set (forward only)")]
