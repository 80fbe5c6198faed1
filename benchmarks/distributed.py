"""Throughput of the distributed search (placer/distributed.py) on a local Ray; prints JSON.

* ``sim``: placements per second of the 2017 learner (``rl``, K=8) on the simulator, small
  RNNLM on k80x2, in-process and distributed (:func:`placer.search.run_search` with the learner and
  its environment, or with :func:`placer.distributed.ray_controllers`' controllers and workers) with
  one controller and 1, 2, 4 workers (synchronous), and 2 controllers x 4 workers
  asynchronous; the distributed rates exclude the actors' start (reported apart), and
  ``overhead_ms_per_placement`` is (distributed - in-process) seconds per placement.
* ``slow``: the same with every measurement taking 0.5 s more (``measure_delay_s``, a
  stand-in for real execution): seconds and the speed-up of 2 and 4 workers over 1.

Usage: python benchmarks/distributed.py [--budget 200] [--slow-budget 16] [--delay 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=200, help="placements of each simulator-backed search")
    parser.add_argument("--slow-budget", type=int, default=16, help="placements of each slow-environment search")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds added to each slow measurement")
    args = parser.parse_args()

    from cluster.factory import make_environment
    from cluster.spec import load_cluster
    import torch

    from compgraph.prepare import prepare
    from placer.distributed import RaySettings, ray_controllers
    from placer.ray_session import ray_session
    from placer.reinforce import ReinforceConfig, ReinforceLearner
    from placer.search import run_search

    prep, spec = prepare("rnnlm", "small"), load_cluster("k80x2")
    cfg = ReinforceConfig(budget=args.budget, k=8, seed=0)
    out: dict = {"model": "rnnlm-small", "cluster": "k80x2", "learner": "rl", "k": 8, "cpus": os.cpu_count(),
                 "load_average_1m_at_start": os.getloadavg()[0], "sim": {"budget": args.budget},
                 "slow": {"budget": args.slow_budget, "delay_s": args.delay}}
    env = make_environment("sim", prep, spec)
    # One intra-op thread, as in Ray's actors (OMP_NUM_THREADS=1): on a loaded machine torch's
    # default threads make the in-process search many times slower (563 s vs ~16 s at load 26).
    torch.set_num_threads(1)
    out["in_process_torch_threads"] = 1
    t = time.perf_counter()
    run_search(ReinforceLearner(env, cfg), env)
    in_process_s = time.perf_counter() - t
    out["sim"]["in_process"] = {"seconds": in_process_s, "placements_per_s": args.budget / in_process_s}

    def timed(config, **kw) -> dict:
        started: dict = {}
        t0 = time.perf_counter()
        settings = RaySettings(on_start=lambda _: started.setdefault("t", time.perf_counter()), **kw)
        with ray_controllers("rl", config, prep, spec, "sim", settings) as (controllers, evaluator):
            res = run_search(controllers, evaluator)
        end = time.perf_counter()
        run_s = end - started["t"]
        return {"seconds_after_start": run_s, "actor_start_s": started["t"] - t0,
                "placements_per_s": config.budget / run_s, "best_step_time_s": res.best_step_time_s}

    t = time.perf_counter()
    with ray_session(num_cpus=os.cpu_count()):
        out["ray_start_s"] = time.perf_counter() - t
        for w in (1, 2, 4):
            r = timed(cfg, controllers=1, workers=w)
            r["overhead_ms_per_placement"] = 1000 * (r["seconds_after_start"] - in_process_s) / args.budget
            out["sim"][f"1x{w}_sync"] = r
        r = timed(cfg, controllers=2, workers=4, async_updates=True)
        r["overhead_ms_per_placement"] = 1000 * (r["seconds_after_start"] - in_process_s) / args.budget
        out["sim"]["2x4_async"] = r
        slow = cfg.model_copy(update={"budget": args.slow_budget})
        for w in (1, 2, 4):
            out["slow"][f"1x{w}_sync"] = timed(slow, controllers=1, workers=w, measure_delay_s=args.delay)
        base = out["slow"]["1x1_sync"]["seconds_after_start"]
        for w in (2, 4):
            out["slow"][f"speedup_{w}_workers"] = base / out["slow"][f"1x{w}_sync"]["seconds_after_start"]
    out["load_average_1m_at_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
