"""Every learner and the local-search reference at equal budget on the paper graphs; prints JSON and a table.

Per graph (default: nmt paper on k80x4, inception_v3 paper on k80x4, rnnlm paper on k80x2, the
6.7B decoder on h100x8 and GPT-2 small on a100x4-pcie; 2017 groups, the simulator) and method (default: every learner of :data:`placer.LEARNERS`,
``local_search`` included) and seed: the best step time after ``--budget`` placements (2,400:
Post's budget), the placements it took to come within 5% of its own final best, and the
CPU-seconds of the search loop (``SearchResult.cpu_time_s``, as the experiment's ``placements_per_cpu_s``;
torch on one thread, simulator included). Per graph and method,
the medians over the seeds of the best step time divided by

* ``expert``: the graph's expert placement;
* ``best baseline``: the fastest of the baselines that apply (the optimum aside);
* ``best known``: the fastest placement known for the graph: every baseline, the optimum
  when ``--optimum`` is given, and every search of this benchmark (any method, any seed).

A *variant* measures a named option beside the faithful setting: ``--variant
LABEL=LEARNER:FIELD=VALUE[,FIELD=VALUE]`` adds a method row ``LABEL`` (e.g. ``--variant
rl_lr3=rl:learning_rate=0.001``). Resumable: every finished search goes to ``--out`` at once,
and searches already there are skipped (``--fresh`` starts over), so the 3 x 10 x 3 searches
can run over several sessions.

    python benchmarks/learners.py [--graphs nmt:k80x4,inception_v3:k80x4,rnnlm:k80x2,gpt/6.7b:h100x8,gpt/gpt2:a100x4-pcie]
        [--methods rl,post,...] [--budget 2400] [--budget-for rl=300] [--seeds 0,1,2]
        [--variant LABEL=LEARNER:FIELD=VALUE] [--optimum] [--out placement-runs/learners-bench.json] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DEFAULT_GRAPHS = "nmt:k80x4,inception_v3:k80x4,rnnlm:k80x2,gpt/6.7b:h100x8,gpt/gpt2:a100x4-pcie"
"""The paper graphs (paper size, the physical K80 presets) and today's (issue 36 item 7): the 6.7B decoder
on ``h100x8`` and GPT-2 small on ``a100x4-pcie`` (PyTorch steps)."""


def parse_graph(item: str) -> tuple[str, str, str]:
    """``MODEL[/SIZE]:CLUSTER`` -> ``(model, size, cluster)``; the size defaults to ``paper``.

    Raises:
        SystemExit: an item without a cluster (names the item).
    """
    graph, sep, cluster = item.partition(":")
    if not sep or not graph or not cluster:
        raise SystemExit(f"--graphs {item!r}: expected MODEL[/SIZE]:CLUSTER (e.g. nmt:k80x4, gpt/6.7b:h100x8)")
    model, _, size = graph.partition("/")
    return model, size or "paper", cluster


def _value(text: str):
    """A ``--variant`` value as JSON (numbers, true/false, null), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_variants(items: list[str], learners) -> dict[str, tuple[str, dict]]:
    """``LABEL=LEARNER:FIELD=VALUE,...`` -> ``{label: (learner, options)}``, options checked by the learner's config.

    Raises:
        SystemExit: a malformed item, an unknown learner or an option its config refuses.
    """
    out = {}
    for item in items:
        label, _, rest = item.partition("=")
        name, _, opts = rest.partition(":")
        if not label or name not in learners:
            raise SystemExit(f"--variant {item!r}: expected LABEL=LEARNER:FIELD=VALUE with LEARNER one of {', '.join(learners)}")
        options = {}
        for pair in filter(None, opts.split(",")):
            field, _, value = pair.partition("=")
            if field not in learners[name].Config.model_fields:
                raise SystemExit(f"--variant {item!r}: {name} has no option {field!r}")
            options[field] = _value(value)
        learners[name].Config(**options)  # validate now, not after an hour of searching
        out[label] = (name, options)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default=DEFAULT_GRAPHS, help="MODEL[/SIZE]:CLUSTER,... (size: paper unless given)")
    ap.add_argument("--methods", default=None, help="learners (default: every one, local_search included)")
    ap.add_argument("--budget", type=int, default=2400)
    ap.add_argument("--budget-for", action="append", default=[], help="METHOD=N: another budget for one method (said in the output)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variant", action="append", default=[], help="LABEL=LEARNER:FIELD=VALUE[,FIELD=VALUE]: a named option as its own row")
    ap.add_argument("--optimum", action="store_true", help="compute the optimum too (best known; minutes per graph)")
    ap.add_argument("--out", default="placement-runs/learners-bench.json")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--cache-dir", default="placement-runs/graph-cache")
    args = ap.parse_args(argv)

    import torch

    from baselines import applicable_baselines
    from baselines.report import run_baselines
    from cluster.factory import make_environment
    from cluster.fast_simulator import load_kernel
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare
    from placer import LEARNERS
    from placer.search import run_search
    from tasks.search import learner_grouping, warm_start_config

    torch.set_num_threads(1)
    methods = {m: (m, {}) for m in (args.methods.split(",") if args.methods else LEARNERS)}
    for m in methods:
        if m not in LEARNERS:
            raise SystemExit(f"--methods: unknown {m!r}; valid: {', '.join(LEARNERS)}")
    methods.update(parse_variants(args.variant, LEARNERS))
    budgets = {k: int(v) for k, v in (x.split("=") for x in args.budget_for)}
    seeds = [int(s) for s in args.seeds.split(",")]
    out_path = Path(args.out)
    state = json.loads(out_path.read_text()) if out_path.exists() and not args.fresh else {"graphs": {}, "runs": []}
    done = {(r["graph"], r["method"], r["seed"], r["budget"]) for r in state["runs"]}

    def save() -> None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(out_path.name + ".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, out_path)

    for item in args.graphs.split(","):
        model, size, cluster = parse_graph(item)
        key = item
        prepared = prepare(model, size, grouper="2017", cache_dir=args.cache_dir)
        spec = load_cluster(cluster)
        load_kernel(spec)  # numba's compiled simulator, before the first search's CPU-seconds (once per process)
        if key not in state["graphs"] or (args.optimum and state["graphs"][key].get("optimum_s") is None):
            wanted = applicable_baselines(spec, user_graph=False, optimum=args.optimum)
            r = run_baselines(prepared, spec, wanted)
            state["graphs"][key] = {"groups": prepared.grouping.num_groups, "ops": prepared.graph.num_ops,
                                    "baselines": {m: row["step_time_s"] for m, row in r["methods"].items() if m != "optimum"},
                                    "best_baseline": r["best_baseline"], "optimum_s": r.get("optimum_s")}
            save()
        starts: dict = {}  # the warm-started learners' start (placer.warm): the best baseline, resolved once a graph
        for label, (name, options) in methods.items():
            cls = LEARNERS[name]
            grouping = learner_grouping(name, prepared, cls.Config(**options))
            env = make_environment("sim", prepared, spec, grouping=grouping)
            budget = budgets.get(label, args.budget)
            for seed in seeds:
                if (key, label, seed, budget) in done:
                    continue
                config, _ = warm_start_config(name, cls.Config(budget=budget, seed=seed, **options), prepared, spec,
                                              "sim", cache=starts)
                learner = cls(env, config)
                r = run_search(learner, env)
                cpu = r.cpu_time_s  # the search loop's CPU-seconds, as the experiment's placements_per_cpu_s
                row = {"graph": key, "method": label, "learner": name, "options": options, "seed": seed, "budget": budget,
                       "units": env.grouping.num_groups, "best_step_time_s": r.best_step_time_s,
                       "oom_placements": sum(t is None for t in r.step_times),
                       "placements_to_within_5pct": r.placements_to_within(0.05), "cpu_s": cpu,
                       "placements_per_cpu_s": r.measured / cpu if cpu > 0 else None, "load_avg_1m": os.getloadavg()[0]}
                state["runs"].append(row)
                done.add((key, label, seed, budget))
                save()
                print(json.dumps(row), file=sys.stderr, flush=True)
    summary = summarize(state, list(methods), seeds)
    state["summary"] = summary
    save()
    print_table(summary)
    print(json.dumps({"summary": summary, "graphs": state["graphs"]}, indent=1))
    return 0


def summarize(state: dict, methods: list[str], seeds: list[int]) -> list[dict]:
    """One row per (graph, method, budget): medians over ``seeds`` of the best step time and its ratios
    (``x_expert``, ``x_best_baseline``, ``x_best_known``), of the placements to within 5% and of the CPU-seconds.
    The best known placement of a graph is over every run in ``state`` (any method, seed or budget)."""
    rows = []
    for key, g in state["graphs"].items():
        runs = [r for r in state["runs"] if r["graph"] == key and r["seed"] in seeds]
        ran = [r["best_step_time_s"] for r in state["runs"] if r["graph"] == key and r["best_step_time_s"] is not None]
        base = {m: t for m, t in g["baselines"].items() if t is not None}
        known = min([*base.values(), *ran, *([g["optimum_s"]] if g.get("optimum_s") else [])], default=None)
        best_base = base.get(g["best_baseline"]) if g.get("best_baseline") else None
        for m, budget in sorted({(r["method"], r["budget"]) for r in runs if r["method"] in methods},
                                key=lambda mb: (methods.index(mb[0]), mb[1])):
            mine = [r for r in runs if r["method"] == m and r["budget"] == budget]
            times = [r["best_step_time_s"] for r in mine if r["best_step_time_s"] is not None]
            med = statistics.median(times) if len(times) == len(mine) else None  # any seed without a placement that ran: no median

            def over(ref):
                return None if med is None or not ref else med / ref

            within = [r["placements_to_within_5pct"] for r in mine if r["placements_to_within_5pct"] is not None]
            rows.append({"graph": key, "method": m, "seeds": len(mine), "budget": budget,
                         "median_best_s": med, "x_expert": over(base.get("expert")), "x_best_baseline": over(best_base),
                         "x_best_known": over(known), "best_baseline": g.get("best_baseline"), "best_known_s": known,
                         "median_placements_to_within_5pct": statistics.median(within) if within else None,
                         "median_cpu_s": statistics.median(r["cpu_s"] for r in mine),
                         "median_placements_per_cpu_s": statistics.median(r["placements_per_cpu_s"] or 0.0 for r in mine)})
    return rows


def print_table(rows: list[dict]) -> None:
    """The summary as a rich table on stderr."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="learners at equal budget (medians over seeds)")
    for col in ("graph", "method", "seeds", "budget", "best (s)", "x expert", "x best baseline", "x best known",
                "to within 5%", "CPU s", "placements / CPU s"):
        table.add_column(col, justify="left" if col in ("graph", "method") else "right")

    def f(x, digits=3):
        return "-" if x is None else f"{x:.{digits}f}"

    for r in rows:
        table.add_row(r["graph"], r["method"], str(r["seeds"]), str(r["budget"]), f(r["median_best_s"], 4), f(r["x_expert"]),
                      f(r["x_best_baseline"]), f(r["x_best_known"]), f(r["median_placements_to_within_5pct"], 0),
                      f(r["median_cpu_s"], 1), f(r["median_placements_per_cpu_s"], 1))
    Console(stderr=True).print(table)


if __name__ == "__main__":
    sys.exit(main())
