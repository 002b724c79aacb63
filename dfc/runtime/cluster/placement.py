"""Where a cluster's tasks run: a placement per job or task, turned into Ray's own scheduling options.

    connect(tasks={"worker": 2, "ps": 1},
            placement={"ps": "label:zone=us-east", "worker": "spread", "worker:1": "node:97202a2a"})

A placement names a task ("worker:1") or a whole job ("worker"); the task's own entry wins. Forms:

* ``"spread"`` — task k of the job on the k-th live node (by node id, round robin; nodes with GPUs when
  the job asks for them), by node affinity: Ray's own SPREAD strategy, and a soft affinity, are best
  effort and put two tasks on one node of two in some runs;
* ``"node:ID"`` — that node (its Ray node id, or a unique prefix of it): node affinity, not soft;
* ``"ip:ADDRESS"`` — the one node at that address (an error if several nodes share it, as raylets
  started on one machine do: name the node or a label then);
* ``"label:KEY=VALUE"`` — a node with that label (``ray start --labels``): Ray's label selector;
  a dict ``{"label": {"zone": "b", "rack": "3"}}`` asks for several;
* ``"resource:NAME"`` — a node that offers the custom resource NAME (``ray start --resources``).

Node ids, addresses, labels and resources are checked against the nodes Ray knows before a task is
started, so a misspelled one is a DfcError listing what exists instead of a task that waits for a node
that never comes.
"""
from dfc.errors import DfcError

KINDS = ("spread", "node", "ip", "label", "resource")


def parse(spec, task_names):
    """{job or task: placement} (a dict, or "ps=label:zone=b;worker=spread") -> {task: (kind, value)}."""
    if not spec:
        return {}
    if isinstance(spec, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            key, eq, value = part.partition("=")
            if not eq:
                raise DfcError(f"bad placement {part!r} (use JOB=PLACE or TASK=PLACE, e.g. ps=label:zone=b)")
            pairs[key.strip()] = value.strip()
        spec = pairs
    if not isinstance(spec, dict):
        raise DfcError(f"placement must be a dict {{job or task: place}}, not {type(spec).__name__}")
    jobs = {t.split(":")[0] for t in task_names}
    for key in spec:
        if key not in jobs and key not in task_names:
            raise DfcError(f"placement names {key!r}, which is neither a job nor a task of this cluster "
                           f"(tasks: {', '.join(task_names)})")
    out = {}
    for task in task_names:
        value = spec.get(task, spec.get(task.split(":")[0]))
        if value is not None:
            out[task] = _one(value, task)
    return out


def _one(value, task):
    if isinstance(value, dict) and set(value) == {"label"} and isinstance(value["label"], dict):
        return "label", {str(k): str(v) for k, v in value["label"].items()}
    if not isinstance(value, str):
        raise DfcError(f"bad placement for {task}: {value!r} (a string such as 'spread', 'node:ID', "
                       f"'ip:ADDRESS', 'label:KEY=VALUE', 'resource:NAME', or {{'label': {{...}}}})")
    if value == "spread":
        return "spread", None
    kind, colon, rest = value.partition(":")
    if not colon or kind not in KINDS[1:] or not rest:
        raise DfcError(f"bad placement for {task}: {value!r} (use spread, node:ID, ip:ADDRESS, label:KEY=VALUE "
                       f"or resource:NAME)")
    if kind == "label":
        k, eq, v = rest.partition("=")
        if not eq or not k:
            raise DfcError(f"bad label placement for {task}: {value!r} (use label:KEY=VALUE)")
        return "label", {k: v}
    return kind, rest


def ray_options(task, where, nodes, gpus=0):
    """Ray actor options that put `task` where `where` says; nodes: ray.nodes(); gpus: what the task asks."""
    kind, value = where
    alive = [n for n in nodes if n.get("Alive")]
    if kind == "spread":
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        ids = sorted(n["NodeID"] for n in alive if (n.get("Resources") or {}).get("GPU", 0) >= gpus)
        if not ids:
            raise DfcError(f"the Ray cluster has no live node{' with GPUs' if gpus else ''} to spread {task} over")
        k = int(task.rsplit(":", 1)[1])
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ids[k % len(ids)], soft=False)}
    if kind == "label":
        if not any(all((n.get("Labels") or {}).get(k) == v for k, v in value.items()) for n in alive):
            have = sorted({f"{k}={v}" for n in alive for k, v in (n.get("Labels") or {}).items()
                           if not k.startswith("ray.io/")})
            raise DfcError(f"no node of the Ray cluster has the labels {value} asked for {task} "
                           f"(labels: {', '.join(have) or 'none'})")
        return {"label_selector": dict(value)}
    if kind == "resource":
        if not any(value in (n.get("Resources") or {}) for n in alive):
            have = sorted({r for n in alive for r in (n.get("Resources") or {})
                           if r not in ("CPU", "GPU", "memory", "object_store_memory") and not r.startswith("node:")})
            raise DfcError(f"no node of the Ray cluster offers the resource {value!r} asked for {task} "
                           f"(custom resources: {', '.join(have) or 'none'})")
        return {"resources": {value: 0.001}}
    if kind == "node":
        match = [n for n in alive if n["NodeID"].startswith(value)]
    else:
        match = [n for n in alive if n.get("NodeManagerAddress") == value]
    if len(match) != 1:
        listed = ", ".join(f"{n['NodeID'][:12]} at {n.get('NodeManagerAddress')}" for n in alive)
        what = "matches no" if not match else f"matches {len(match)}"
        hint = " (name one by node:ID or label:KEY=VALUE)" if kind == "ip" and match else ""
        raise DfcError(f"the placement {kind}:{value} of {task} {what} live node of the Ray cluster{hint}; "
                       f"nodes: {listed}")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(match[0]["NodeID"], soft=False)}
