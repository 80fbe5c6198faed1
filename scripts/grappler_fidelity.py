"""Our simulator against grappler's VirtualCluster (TensorFlow's cost model), with diagnostics.

For each model: ``--random`` random placements over all devices, as many over the GPUs only,
and the baselines; Kendall tau and MAPE of the simulator against grappler overall and over the
GPU-only placements, for the cluster as given and for two variants that remove what grappler
does not model (links free; links free and no per-op overhead), plus the single-device step
times of both. Prints one JSON object.

    PYTHONPATH=. python scripts/grappler_fidelity.py --models rnnlm,inception_v3 --size small --cluster k80x2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _variant(spec, free_links: bool, no_overhead: bool):
    upd = {}
    if free_links:
        fast = {"bandwidth": 1e18, "latency_s": 0.0}
        upd["default_link"] = type(spec.default_link)(**fast) if spec.default_link is not None else None
        upd["links"] = [link.model_copy(update=fast) for link in spec.links]
    if no_overhead and "op_overhead_s" in type(spec.devices[0]).model_fields:
        upd["devices"] = [d.model_copy(update={"op_overhead_s": 0.0}) for d in spec.devices]
    return spec.model_copy(update=upd)


def main() -> None:
    from baselines import BASELINES, BaselineContext
    from cluster.factory import make_environment
    from cluster.fidelity import _agreement, random_placements
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="rnnlm,inception_v3")
    ap.add_argument("--size", default="small")
    ap.add_argument("--cluster", default="k80x2")
    ap.add_argument("--random", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    spec = load_cluster(a.cluster)
    out = {"cluster": spec.name, "size": a.size, "random": a.random, "models": {}}
    for model in a.models.split(","):
        t0 = time.time()
        prep = prepare(model, a.size)
        G, D = prep.grouping.num_groups, len(spec.devices)
        pl = random_placements(G, D, a.random, seed=a.seed)
        pl.update(random_placements(G, D, a.random, seed=a.seed + 1, devices=spec.gpu_indices, prefix="gpu_random"))
        ctx = BaselineContext(prep.graph, prep.grouping, spec, prep.benchmark, prep.config)
        for name, fn in BASELINES.items():
            try:
                pl[name] = fn(ctx)
            except Exception as exc:  # noqa: BLE001  (a baseline that does not apply is skipped)
                print(f"# {model}: {name} skipped: {exc}")
        grap = make_environment("grappler", prep, spec)
        ref = {k: grap.measure(p) for k, p in pl.items()}
        gpus = set(spec.gpu_indices)
        gpu_only = [k for k, p in pl.items() if set(np.unique(p).tolist()) <= gpus]
        res = {"ops": prep.graph.num_ops, "groups": G, "placements": len(pl), "gpu_only": len(gpu_only), "variants": {}}
        for vname, (fl, no) in {"as_is": (False, False), "free_links": (True, False),
                                "free_links_no_overhead": (True, True)}.items():
            sim = make_environment("sim", prep, _variant(spec, fl, no))
            s = {k: sim.measure(p) for k, p in pl.items()}
            tau, mape = _agreement([s[k].simulated_step_time_s for k in pl], [ref[k].step_time_s for k in pl])
            tg, mg = _agreement([s[k].simulated_step_time_s for k in gpu_only], [ref[k].step_time_s for k in gpu_only])
            res["variants"][vname] = {"kendall_tau": tau, "mape": mape, "kendall_tau_gpu_only": tg, "mape_gpu_only": mg}
            if vname == "as_is":
                res["rows"] = {k: {"sim_s": s[k].simulated_step_time_s, "grappler_s": ref[k].step_time_s,
                                   "sim_transfer_s": float(sum(s[k].transfer_s)),
                                   "sim_compute_s": [round(c, 6) for c in s[k].compute_s],
                                   "grappler_compute_s": [round(c, 6) for c in ref[k].compute_s]}
                               for k in pl}
        for kind, dev in (("cpu", spec.cpu_indices[:1]), ("gpu", spec.gpu_indices[:1])):
            if dev:
                p = np.full(G, dev[0], dtype=np.int64)
                res[f"all_on_{kind}"] = {"sim_s": make_environment("sim", prep, spec).measure(p).simulated_step_time_s,
                                         "grappler_s": grap.measure(p).step_time_s}
        res["wall_s"] = time.time() - t0
        out["models"][model] = res
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
