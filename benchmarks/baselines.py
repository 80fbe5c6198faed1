"""Every baseline, the lower bound and the optimum on the paper graphs; prints JSON.

For each model (rnnlm, nmt, inception_v3 at paper size, 2017 grouping) and cluster (k80x2,
k80x4): each baseline's simulated step time, OOM flag, devices used and the seconds it
took to compute; the lower bound (and its components) with its seconds; the optimum
(a MILP of at most ``--node-limit`` nodes, or candidates polished: these graphs have too many groups to enumerate) with
its proven bound. Resumable: results go to ``--out`` after each (model, cluster) and the
pairs already there are skipped (``--fresh`` starts over).

    PYTHONPATH=. python benchmarks/baselines.py --out placement-runs/baselines-bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from cluster.reproduce import PAPER_TABLE2  # noqa: E402  (2017 Table 2, from cluster/tables.py)

PAPER_TABLE_2 = {  # 2017 Table 2, measured seconds: Scotch, MinCut, Expert, RL-based
    (m, f"k80x{g}"): tuple(t["rows"][g][k] for k in ("scotch", "mincut", "expert", "rl"))
    for m, t in PAPER_TABLE2.items() for g in (2, 4)}
METHODS = ("single_cpu", "single_gpu", "scotch", "mincut", "expert", "metis", "m_topo", "m_etf", "m_sct", "optimum")


def markdown(report: dict) -> str:
    """The README tables: step times (x lower bound) beside 2017 Table 2, and seconds per placer."""
    lines = ["| model, cluster | " + " | ".join(METHODS) + " | lower bound | best / bound | 2017 Table 2 (Scotch, MinCut, Expert, RL) |",
             "|---|" + "---|" * (len(METHODS) + 3)]
    for key, r in report["results"].items():
        model, _, cluster = key.split("/")
        cells = []
        for m in METHODS:
            row = r["methods"].get(m)
            if row is None:
                cells.append("-")
                continue
            t = "OOM" if row["oom"] else ("-" if row["step_time_s"] is None else f"{row['step_time_s']:.3f}")
            cells.append(f"{t} ({row['x_lower_bound']:.2f}x)" if row.get("x_lower_bound") else t)
        times = [row["step_time_s"] for row in r["methods"].values() if row["step_time_s"] is not None]
        lb = r["lower_bound_s"]
        paper = ", ".join(f"{x:.2f}" for x in PAPER_TABLE_2.get((model, cluster), ()))
        lines.append(f"| {model}, {cluster} | " + " | ".join(cells) + f" | {lb:.3f} | {min(times) / lb:.2f}x | {paper} |")
    lines += ["", "| model, cluster (ops / groups) | " + " | ".join(METHODS) + " | lower bound |",
              "|---|" + "---|" * (len(METHODS) + 1)]
    for key, r in report["results"].items():
        model, _, cluster = key.split("/")
        secs = " | ".join("-" if m not in r["methods"] else f"{r['methods'][m]['seconds']:.2f}" for m in METHODS)
        lines.append(f"| {model}, {cluster} ({r['ops']:,} / {r['groups']}) | {secs} | {r['lower_bound_seconds']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="rnnlm,nmt,inception_v3")
    ap.add_argument("--clusters", default="k80x2,k80x4")
    ap.add_argument("--size", default="paper")
    ap.add_argument("--time-limit", type=float, default=None, help="an optional wall-clock cap on the optimum (seconds)")
    ap.add_argument("--node-limit", type=int, default=50, help="the optimum's MILP branch-and-bound nodes at most")
    ap.add_argument("--cache-dir", default="placement-runs/graph-cache")
    ap.add_argument("--out", default="placement-runs/baselines-bench.json")
    ap.add_argument("--fresh", action="store_true", help="ignore the results already in --out")
    ap.add_argument("--markdown", action="store_true", help="print the README tables of the results in --out and exit")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.out).read_text())))
        return

    from baselines.report import run_baselines
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    out = Path(args.out)
    done = {} if args.fresh or not out.exists() else json.loads(out.read_text())
    results = done.get("results", {})
    for model in args.models.split(","):
        prepared = None
        for cluster in args.clusters.split(","):
            key = f"{model}/{args.size}/{cluster}"
            if key in results:
                continue
            if prepared is None:
                t = time.perf_counter()
                prepared = prepare(model, args.size, cache_dir=args.cache_dir)
                prepare_s = time.perf_counter() - t
            start = time.perf_counter()
            r = run_baselines(prepared, load_cluster(cluster), time_limit_s=args.time_limit, node_limit=args.node_limit)
            for row in r["methods"].values():
                row.pop("placement", None)
            results[key] = {"ops": prepared.graph.num_ops, "groups": prepared.grouping.num_groups,
                            "prepare_s": prepare_s, "seconds": time.perf_counter() - start, **r}
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"results": results}, indent=2, default=float) + "\n")
            print(f"{key}: {results[key]['seconds']:.1f} s", file=sys.stderr, flush=True)
    report = {"load_average": os.getloadavg(), "time_limit_s": args.time_limit, "node_limit": args.node_limit, "results": results}
    out.write_text(json.dumps(report, indent=2, default=float) + "\n")
    print(json.dumps(report, indent=2, default=float))


if __name__ == "__main__":
    main()
