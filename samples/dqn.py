"""Deep Q-learning with the whole agent step in the graph (§6.5 of the paper), on a small corridor.

The environment -- a corridor of N cells; the agent starts in cell 0, moves
left or right, and gets reward 1 when it reaches cell N-1, which ends the
episode -- is written in dfc ops, so one graph runs many agent steps:

    for each step:
        act epsilon-greedily with the Q-network, step the environment,
        write (s, a, r, s', done) into a replay buffer held in Variables
        if there is enough experience:            sample a minibatch, Q-learning update (SGD)
        if the experience count is a multiple of TARGET_EVERY:   copy the Q-network into the target network
        if the episode ended:                     record its length, go back to cell 0

Each `if` is an in-graph cond on the amount of experience (a Variable), as in
§6.5. The Q-network is linear in a one-hot encoding of the cell, so the
learned Q-values can be checked against the exact Q* from value iteration.

    python samples/dqn.py [--steps 600]
    dfc compile samples/dqn.py -o out               # -> out/train.json, out/greedy_episode.json
    dfc run out/train.json --input steps=300 --json
"""
import argparse

import numpy as np

import dfc

N = 6                       # corridor cells; the goal is cell N-1
LEFT, RIGHT = 0, 1
GAMMA = 0.9
CAPACITY, BATCH, MIN_EXPERIENCE = 128, 16, 32
TARGET_EVERY = 25
EXPLORE_STEPS, EPS_MIN = 300, 0.1
MAX_EPISODE = 40

rng = np.random.default_rng(0)
W = dfc.Variable(rng.normal(size=(N, 2)) * 0.01, name="W")      # the Q-network
W_target = dfc.Variable(W.initial_value, name="W_target")      # the target network
position = dfc.Variable(np.int64(0), name="position")          # the environment's state
episode_len = dfc.Variable(np.int64(0), name="episode_len")
experience = dfc.Variable(np.int64(0), name="experience")      # agent steps so far
replay = {name: dfc.Variable(np.zeros(CAPACITY, dtype), name=f"replay_{name}")
          for name, dtype in (("s", np.int64), ("a", np.int64), ("r", np.float64), ("s2", np.int64),
                              ("done", np.float64))}
opt = dfc.train.SGD(2.0)


def q_values(states, weights):
    """Q(s, .) for a batch of cells: a linear layer on the one-hot cell."""
    return dfc.one_hot(states, N, dtype="float64") @ weights


def corridor(s, a):
    """The environment in dfc ops: the next cell, the reward and whether the episode is over."""
    s2 = dfc.clip(s + 2 * a - 1, 0, N - 1)
    done = s2 == N - 1
    return s2, dfc.cast(done, "float64"), done


def store(slot, **values):
    """replay[name][slot] = value for each name (a masked overwrite of the buffer Variables)."""
    at_slot = dfc.range(CAPACITY, dtype="int64") == slot
    for name, value in values.items():
        replay[name].assign(dfc.where(at_slot, value, replay[name].read_value()))


def act_and_store():
    """One epsilon-greedy agent step in the corridor, recorded in the replay buffer; returns episode end."""
    s, count = position.read_value(), experience.read_value()
    epsilon = dfc.maximum(EPS_MIN, 1.0 - dfc.cast(count, "float64") / EXPLORE_STEPS)
    greedy = dfc.argmax(q_values(dfc.reshape(s, [1]), W.read_value()), axis=1)[0]
    coin = dfc.cast(dfc.random_uniform([], dtype="float64", seed=1) < 0.5, "int64")
    a = dfc.where(dfc.random_uniform([], dtype="float64", seed=2) < epsilon, coin, greedy)
    s2, r, done = corridor(s, a)
    store(count % CAPACITY, s=s, a=a, r=r, s2=s2, done=dfc.cast(done, "float64"))
    experience.assign_add(1)
    length = episode_len.assign_add(1)
    ended = done | (length >= MAX_EPISODE)
    position.assign(dfc.where(ended, 0, s2))
    return ended, length


def q_learning_update():
    """Sample a minibatch from the buffer and take one SGD step on the TD error against the target network."""
    filled = dfc.cast(dfc.minimum(experience.read_value(), CAPACITY), "float64")
    idx = dfc.cast(dfc.floor(dfc.random_uniform([BATCH], dtype="float64", seed=3) * filled), "int64")
    s, a, r, s2, done = (dfc.gather(replay[k].read_value(), idx) for k in ("s", "a", "r", "s2", "done"))
    target = r + GAMMA * (1.0 - done) * dfc.reduce_max(q_values(s2, W_target.read_value()), axis=1)
    q = dfc.reduce_sum(q_values(s, W.read_value()) * dfc.one_hot(a, 2, dtype="float64"), axis=1)
    loss = dfc.reduce_mean(dfc.square(q - dfc.stop_gradient(target)))
    opt.minimize(loss, [W])


@dfc.function(input_signature=[dfc.TensorSpec([], "int64")])
def train(steps):
    """`steps` agent steps in one graph; returns the lengths of the episodes that ended, and Q."""
    lengths = dfc.TensorArray("int64")
    episodes = 0
    for _ in range(steps):
        ended, length = act_and_store()
        # Learn once there is enough experience. This means `if experience >= MIN_EXPERIENCE:`, but
        # dfc.gradients inside an `if` branch fails (dfc bug, reported), so it is written as a loop that
        # runs once or not at all -- still an in-graph conditional on the amount of experience.
        for _ in range(dfc.cast(experience.read_value() >= MIN_EXPERIENCE, "int64")):
            q_learning_update()
        if experience.read_value() % TARGET_EVERY == 0:         # refresh the target network now and then
            W_target.assign(W.read_value())
        if ended:
            lengths = lengths.write(episodes, length)
            episode_len.assign(0)
            episodes += 1
    return lengths.stack(), W.read_value()


@dfc.function(input_signature=[dfc.TensorSpec([N, 2], "float64")])
def greedy_episode(q_table):
    """Steps the greedy policy of a Q table needs from cell 0 to the goal (MAX_EPISODE if it never gets there)."""
    s = dfc.constant(0, "int64")
    t = 0
    while t < MAX_EPISODE:
        s, _, done = corridor(s, dfc.argmax(q_table[s], axis=0))
        t += 1
        if done:
            break
    return t


def optimal_q():
    """Q* of the corridor by value iteration (the reference)."""
    q = np.zeros((N, 2))
    for _ in range(200):
        for s in range(N - 1):
            for a in (LEFT, RIGHT):
                s2 = min(max(s + 2 * a - 1, 0), N - 1)
                q[s, a] = 1.0 if s2 == N - 1 else GAMMA * q[s2].max()
    return q


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args(argv)
    before = int(greedy_episode(W.initial_value))
    lengths, q = train(np.int64(args.steps))
    after = int(greedy_episode(q))
    q_star = optimal_q()
    k = min(5, len(lengths) // 2)
    print(f"{args.steps} agent steps, {len(lengths)} episodes; mean episode length first {k} "
          f"{lengths[:k].mean():.1f} -> last {k} {lengths[-k:].mean():.1f} (optimum {N - 1})")
    print(f"greedy policy reaches the goal in {before} steps before training, {after} after "
          f"({MAX_EPISODE} = never); max |Q - Q*| over the cells 0..{N - 2}: {np.abs(q - q_star)[:N - 1].max():.3f}")
    return lengths, q


if __name__ == "__main__":
    main()
