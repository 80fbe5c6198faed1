"""A 7-op graph on 3 devices whose optimum is known by enumeration (3^7 = 2,187 placements
through the simulator), and a child process for the interrupt tests:

    python tests/learner_toy.py LEARNER LOG CHECKPOINT DELAY_S [resume] [pause=N]

runs LEARNER's search on the toy graph (budget and options of :data:`SEARCH`), sleeping
``DELAY_S`` per measured placement (with ``pause=N``: printing ``paused`` at the N-th and
blocking there until a signal), and prints the result as JSON on its last line.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster.simulated import SimulatedEnvironment  # noqa: E402
from compgraph.grouping import colocation_grouping  # noqa: E402
from compgraph.ir import Edge, Grouping, OpGraph  # noqa: E402
from test_simulator import _dev, _op, _spec  # noqa: E402

#: op seconds on device 0; device 1 is 1.3x and device 2 2x slower. Two branches (b, c) from
#: a to z and an independent op f; links 1,000 B/s. Unique optimum 12.41 s, next 12.70 s.
BASE_S = [2.0, 3.1, 3.0, 3.8, 0.9, 3.1, 3.7]


def toy_graph() -> tuple[OpGraph, Grouping, object, np.ndarray]:
    ops = [_op("a", 400), _op("b1", 300), _op("b2", 200), _op("c1", 300), _op("c2", 200), _op("f", 100), _op("z", 0)]
    edges = [Edge(0, 1, 400), Edge(0, 3, 400), Edge(1, 2, 300), Edge(3, 4, 300), Edge(2, 6, 200), Edge(4, 6, 200),
             Edge(5, 6, 100)]
    graph = OpGraph("toy7", ops, edges)
    base = np.array(BASE_S)
    times = np.stack([base, base * 1.3, base * 2.0], axis=1)
    grouping = Grouping(np.arange(7), [o.name for o in ops], "ops")
    spec = _spec(_dev("/gpu:0"), _dev("/gpu:1"), _dev("/gpu:2"), bandwidth=1000.0)
    return graph, grouping, spec, times


def toy_env(units: str = "groups") -> SimulatedEnvironment:
    """The toy environment over the learner's units (groups, or colocation units: the same 7 ops)."""
    graph, grouping, spec, times = toy_graph()
    if units == "colocation":
        grouping = colocation_grouping(graph)
    return SimulatedEnvironment(graph, grouping, spec, op_times=times)


def optimum() -> tuple[float, np.ndarray]:
    """The exact optimum by enumeration: ``(step time s, [7] placement)``."""
    env = toy_env()
    allp = np.array(list(itertools.product(range(3), repeat=7)))
    t = np.array([m.step_time_s for m in env.measure_batch(allp)])
    i = int(np.argmin(t))
    return float(t[i]), allp[i]


#: per-learner test settings (budget and options) with which one of seeds 0-2 reaches the
#: optimum on the toy (measured: rl seed 2 at placement 750, seeds 0-1 stop at 12.70 s;
#: post seed 1; ppo seed 0; ce every seed; pg seed 2). The toy's steps take seconds, so
#: Post's seconds-scaled advantage with learning rate 1 overshoots for ppo and pg alone.
SEARCH: dict[str, dict] = {
    "rl": {"budget": 1500, "hidden_size": 32, "learning_rate": 0.003},
    "post": {"budget": 600},
    "ppo": {"budget": 600, "ppo_learning_rate": 0.1},
    "ce": {"budget": 600},
    "pg": {"budget": 600, "ppo_learning_rate": 0.1},
    # the op-grouping learners with test-size networks (algorithms unchanged); their optimum
    # tests are in test_learners_grouping.py, on a graph with colocation constraints
    "hierarchical": {"budget": 60, "hidden_size": 32},
    "eagle": {"budget": 60, "hidden_size": 32, "num_groups": 16},
    "eagle_ce": {"budget": 60, "hidden_size": 32, "num_groups": 16, "ce_interval": 20},
}
DEFAULT_SEARCH = {"budget": 600}

#: The warm-started learners' start on the toy (``init_ops``, :mod:`placer.warm`): every op on device 0,
#: 19.6 s (every op back to back on the fastest device; the optimum is 12.41 s).
TOY_START = [0, 0, 0, 0, 0, 0, 0]


def make_learner(name: str, seed: int = 0, **override):
    """``name``'s learner on the toy with :data:`SEARCH`'s settings (a warm-started variant, ``rl_warm``...:
    its learner's, starting from :data:`TOY_START`), and its environment."""
    from placer import LEARNERS
    from placer.warm import WARM_SUFFIX, base_learner

    cls = LEARNERS[name]
    settings = {**SEARCH.get(base_learner(name), DEFAULT_SEARCH), "seed": seed, **override}
    if name.endswith(WARM_SUFFIX):
        settings.setdefault("init_ops", list(TOY_START))
    env = toy_env(cls.units)
    return cls(env, cls.Config(**settings)), env


class SlowEnv:
    """``env`` with ``delay_s`` seconds of sleep per measured placement (an interruptible search).

    With ``pause_after`` = N, the N-th measurement prints ``paused`` on stdout (the handshake a
    test waits for) and then blocks until a signal ends the process: the search is stopped at a
    known point, whatever the machine's load.
    """

    def __init__(self, env, delay_s: float, pause_after: int | None = None) -> None:
        self.env, self.delay_s, self.pause_after, self.measured = env, delay_s, pause_after, 0
        self.kind, self.graph, self.grouping, self.spec, self.simulator = env.kind, env.graph, env.grouping, env.spec, env.simulator

    def measure(self, p):
        time.sleep(self.delay_s)
        self.measured += 1
        if self.measured == self.pause_after:
            print("paused", flush=True)
            while True:  # until the test's signal (SIGINT raises KeyboardInterrupt here)
                time.sleep(3600)
        return self.env.measure(p)


def main(argv: list[str]) -> None:
    from placer.search import run_search

    name, log, ckpt, delay = argv[0], argv[1], argv[2], float(argv[3])
    pause = next((int(a.split("=", 1)[1]) for a in argv[4:] if a.startswith("pause=")), None)
    learner, env = make_learner(name, budget=96)
    result = run_search(learner, SlowEnv(env, delay, pause), log_path=log, checkpoint_path=ckpt, resume="resume" in argv,
                        checkpoint_every_s=0.0)
    print(json.dumps({"step_times": result.step_times, "curve": result.curve, "measured": result.measured,
                      "best": [int(x) for x in result.best_placement]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
