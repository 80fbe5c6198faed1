"""Placements per CPU-second of the learners that group ops themselves (hierarchical, eagle, eagle_ce).

Runs each learner's sample -> simulate -> update loop for a few placements on paper-size
graphs placed over their TensorFlow colocation units, and prints one JSON object per line:
placements per CPU-second of this process (``time.process_time``, all threads), wall
seconds, the CPU seconds in sampling, simulating and updating, the learner's set-up CPU
seconds (inputs, networks; once per search), and the machine's load average.

    PYTHONPATH=. python benchmarks/grouping_learners.py [--models nmt:paper,inception_v3:paper]
        [--cluster k80x4] [--learners hierarchical,eagle,eagle_ce] [--placements 20]
        [--set eagle.hidden_size=128 ...]

Graphs come from ``compgraph.prepare`` through the cache ``placement-runs/graph-cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

# the repository first: this script's folder holds benchmarks/baselines.py, which would shadow the package
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="nmt:paper,inception_v3:paper")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--learners", default="hierarchical,eagle,eagle_ce")
    ap.add_argument("--placements", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], help="LEARNER.FIELD=VALUE: a config override (a named option), as --learner-option")
    args = ap.parse_args()

    import placer.eagle  # noqa: F401
    import placer.hierarchical  # noqa: F401
    from cluster.simulated import SimulatedEnvironment
    from cluster.spec import load_cluster
    from compgraph.grouping import coarse_of, colocation_grouping
    from compgraph.prepare import prepare
    from placer import LEARNERS

    from cli.learners import parse_learner_options  # the CLI's --learner-option parsing and validation

    overrides = parse_learner_options(args.set, args.learners.split(","), 1, 0, ap.error)
    spec = load_cluster(args.cluster)
    for model_size in args.models.split(","):
        model, size = model_size.split(":")
        prepared = prepare(model, size, cache_dir="placement-runs/graph-cache")
        graph = prepared.graph
        grouping = coarse_of(colocation_grouping(graph), prepared.grouping)  # the units with their groups (moves_over)
        env = SimulatedEnvironment(graph, grouping, spec)
        env.measure_batch(np.zeros((1, grouping.num_groups), dtype=np.int64))  # compile the simulator
        for name in args.learners.split(","):
            cls = LEARNERS[name]
            c0 = time.process_time()
            learner = cls(env, cls.Config(**overrides.get(name, {})))
            setup = time.process_time() - c0
            cpu = {"sample": 0.0, "simulate": 0.0, "update": 0.0}
            done, best = 0, float("inf")
            w0, c0 = time.perf_counter(), time.process_time()
            while done < args.placements:
                a = time.process_time()
                s = learner.sample(min(learner.batch_size, args.placements - done))
                b = time.process_time()
                ms = env.measure_batch(s.placements)
                c = time.process_time()
                oom = np.array([m.oom for m in ms])
                t = np.array([np.nan if m.oom else m.step_time_s for m in ms], dtype=np.float64)
                learner.update(s, t, oom)
                cpu["sample"] += b - a
                cpu["simulate"] += c - b
                cpu["update"] += time.process_time() - c
                done += len(t)
                if (~oom).any():
                    best = min(best, float(np.nanmin(t)))
            total = time.process_time() - c0
            print(json.dumps({
                "learner": name, "model": model, "size": size, "cluster": spec.name, "ops": graph.num_ops,
                "units": grouping.num_groups, "groups": learner.num_groups, "placements": done,
                "placements_per_cpu_s": round(done / total, 3), "wall_s": round(time.perf_counter() - w0, 2),
                "cpu_s": {k: round(v, 3) for k, v in cpu.items()}, "setup_cpu_s": round(setup, 2),
                "best_step_time_s": best, "config": overrides.get(name, {}),
                "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            }), flush=True)


if __name__ == "__main__":
    main()
