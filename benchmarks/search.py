"""Speed and quality of every learner through the one search loop, in the simulator; prints JSON.

Per learner and graph (default: nmt and inception_v3 at paper size, 2017 groups, k80x4):
placements per CPU-second (the search loop's process CPU time, ``SearchResult.cpu_time_s``, as the
experiment's ``placements_per_cpu_s``; torch on one thread, simulator included), wall seconds, the best step time after 500 and 2,000 placements (``null`` when
the budget was smaller), the final best, and the placements it took to come within 5% of
its own final best.

Usage:
    python benchmarks/search.py [--learners rl,post,ppo,ce,pg] [--models nmt,inception_v3]
        [--size paper] [--cluster k80x4] [--budget 2000] [--budget-for rl=200] [--seed 0]
        [--set rl.attention_size=32 --set eagle.attention=after ...]

``--set LEARNER.FIELD=VALUE`` (as the CLI's ``--learner-option``) measures a named option instead of the paper's default (each row
carries the options it ran with).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    import torch

    from cluster.factory import make_environment
    from cluster.fast_simulator import load_kernel
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare
    from placer import LEARNERS
    from placer.search import run_search
    from tasks.search import learner_grouping

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", default=",".join(LEARNERS))
    ap.add_argument("--models", default="nmt,inception_v3")
    ap.add_argument("--size", default="paper")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--budget-for", action="append", default=[], help="LEARNER=N: a smaller budget for a slow learner")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], help="LEARNER.FIELD=VALUE: a config override (a named option), as --learner-option")
    ap.add_argument("--cache-dir", default="placement-runs/graph-cache")
    args = ap.parse_args()
    torch.set_num_threads(1)
    budgets = {k: int(v) for k, v in (x.split("=") for x in args.budget_for)}
    from cli.learners import parse_learner_options  # the CLI's --learner-option parsing and validation

    overrides = parse_learner_options(args.set, args.learners.split(","), 1, 0, ap.error)
    spec = load_cluster(args.cluster)
    load_kernel(spec)  # numba's compiled simulator, before the first search's CPU-seconds
    out = {"cluster": spec.name, "size": args.size, "seed": args.seed, "torch_threads": 1,
           "load_avg_1m_at_start": os.getloadavg()[0], "runs": []}
    for model in args.models.split(","):
        prepared = prepare(model, args.size, grouper="2017", cache_dir=args.cache_dir)
        for name in args.learners.split(","):
            cls = LEARNERS[name]
            budget = budgets.get(name, args.budget)
            options = overrides.get(name, {})
            env = make_environment("sim", prepared, spec, grouping=learner_grouping(name, prepared, cls.Config(**options)))
            learner = cls(env, cls.Config(budget=budget, seed=args.seed, **options))
            wall = time.perf_counter()
            r = run_search(learner, env)
            cpu, wall = r.cpu_time_s, time.perf_counter() - wall  # cpu: the search loop's, the experiment's definition

            def best_after(n):
                ran = [t for t in r.step_times[:n] if t is not None]
                return min(ran) if len(r.step_times) >= n and ran else None

            row = {"learner": name, "options": options, "model": model, "units": env.grouping.num_groups, "budget": budget,
                   "placements_per_cpu_s": r.measured / cpu, "cpu_s": cpu, "wall_s": wall,
                   "best_after_500_s": best_after(500), "best_after_2000_s": best_after(2000),
                   "final_best_s": r.best_step_time_s, "placements_to_within_5pct": r.placements_to_within(0.05),
                   "load_avg_1m": os.getloadavg()[0]}
            out["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
