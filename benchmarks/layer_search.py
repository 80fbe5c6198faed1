"""The best placement that keeps every layer whole: all assignments of a graph's layer scopes to the GPUs; prints one JSON object.

The 2017 expert puts "each LSTM layer on a device" (Mirhoseini et al. 2017, Sec. 4.2); this enumerates
every such placement, not one: the *leaf scopes* up to ``--depth`` of
[`compgraph.grouping.name_scopes`][compgraph.grouping.name_scopes] (on nmt paper at depth 3, the encoder's and the decoder's
embedding, ``layer_0``, ``layer_1``, the attention, the softmax and ``train_step``: 9 scopes), each
whole on one GPU, every group outside them where the expert puts it; ``G ** L`` placements for ``G``
GPUs and ``L`` leaf scopes, measured in the simulator in batches of 512. It is a reference point
for the searches that move whole scopes (the ``scope_moves`` option, ``local_search``'s
``scope_prob``): a search below its result splits a layer. Not a placer of the project; refused
above ``--max-placements``.

    python benchmarks/layer_search.py [--model nmt] [--size paper] [--cluster k80x4] [--depth 3]
        [--max-placements 1000000] [--cache-dir DIR] [--output BEST.json]

``--output``: the best placement as an op -> device JSON (`placement export --format json`'s shape), a
warm start for the learners (``--init-placement``, or ``init=placement,init_placement=BEST.json`` in
``benchmarks/learners.py --variant``).

Output: ``{"model", "size", "cluster", "depth", "leaf_scopes": [{"scope", "groups"}], "placements",
"seconds", "best_step_time_s", "best": {scope: device}, "expert_step_time_s"}`` (seconds of wall time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from compgraph.grouping import leaf_scopes  # noqa: E402  (after the path; the test reads it here)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="nmt")
    ap.add_argument("--size", default="paper")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--max-placements", type=int, default=1_000_000)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--output", default=None, help="write the best placement here (op -> device JSON)")
    args = ap.parse_args(argv)

    import numpy as np

    from baselines import BASELINES, BaselineContext
    from cluster.factory import make_environment
    from cluster.fast_simulator import load_kernel
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    prepared = prepare(args.model, args.size, grouper="2017", cache_dir=args.cache_dir)
    spec = load_cluster(args.cluster)
    load_kernel(spec)
    env = make_environment("sim", prepared, spec)
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    expert = np.asarray(BASELINES["expert"](ctx), dtype=np.int64)
    leaves = leaf_scopes(prepared.grouping.names, args.depth)
    gpus = ctx.gpus()
    total = len(gpus) ** len(leaves)
    if total > args.max_placements:
        raise SystemExit(f"--depth {args.depth}: {len(leaves)} leaf scopes on {len(gpus)} GPUs are {total:,} placements, "
                         f"more than --max-placements {args.max_placements:,}")
    start = time.perf_counter()
    best_time, best_choice = None, None
    combos = itertools.product(range(len(gpus)), repeat=len(leaves))
    while chunk := list(itertools.islice(combos, 512)):
        batch = []
        for choice in chunk:
            placement = expert.copy()
            for (_, groups), k in zip(leaves, choice):
                placement[groups] = gpus[k]
            batch.append(placement.tolist())
        for choice, m in zip(chunk, env.measure_batch(batch)):
            if not m.oom and (best_time is None or m.step_time_s < best_time):
                best_time, best_choice = m.step_time_s, choice
    seconds = time.perf_counter() - start
    names = spec.device_names
    if best_choice is None:
        print(f"every one of the {total:,} placements ran out of memory: no best, nothing written", file=sys.stderr)
    if args.output and best_choice is not None:
        placement = expert.copy()
        for (_, groups), k in zip(leaves, best_choice):
            placement[groups] = gpus[k]
        ops = prepared.grouping.expand(placement)
        Path(args.output).write_text(json.dumps({
            "model": args.model, "cluster": spec.name, "method": "layer_search",
            "step_time_s": best_time, "devices": {op.name: names[int(d)] for op, d in zip(prepared.graph.ops, ops)}}))
    print(json.dumps({
        "model": args.model, "size": args.size, "cluster": args.cluster, "depth": args.depth,
        "leaf_scopes": [{"scope": s, "groups": len(g)} for s, g in leaves], "placements": total,
        "seconds": round(seconds, 1), "best_step_time_s": best_time,
        "best": None if best_choice is None else {s: names[gpus[k]] for (s, _), k in zip(leaves, best_choice)},
        "expert_step_time_s": env.measure_batch([expert.tolist()])[0].step_time_s,
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
