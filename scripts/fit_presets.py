"""Fit the presets' hardware/TensorFlow parameters to 2017 Table 2, inside their physical bounds, and print JSON.

Leave-one-model-out (fit on two of rnnlm / nmt / inception_v3, predict the third; all three
ways), then one fit on all rows: the shipped presets (:mod:`cluster.fitting` gives the
parameters, their bounds and sources, and the loss; :func:`cluster.reproduce.fit` the two
stages). ``--write`` stores the all-rows fit in every preset of :mod:`cluster.machines`
(``k80x2``, ``k80x4``, ``gcp-k80x2/4/8``, ``p100x4``) and every fit in
``cluster/presets/k80_fit.json`` (read by ``placement reproduce`` for the held-out column).

    python scripts/fit_presets.py [--write] [--rounds 3] [--max-nfev 200] [--prior-weight 0.05] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from functools import partial  # noqa: E402

from baselines import place_baselines  # noqa: E402
from cluster.fitting import param_table  # noqa: E402
from cluster.reproduce import (  # noqa: E402
    BASELINE_METHODS, MODELS, PAPER_TABLE2, fit, load_table_data, paper_cells, predict, write_presets,
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the presets and cluster/presets/k80_fit.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-nfev", type=int, default=200)
    ap.add_argument("--prior-weight", type=float, default=0.05, help="pull towards each parameter's reference (0: none)")
    ap.add_argument("--cache-dir", default="placement-runs/graph-cache")
    args = ap.parse_args(argv)
    t0 = time.time()
    data = load_table_data(MODELS, args.cache_dir, place=partial(place_baselines, BASELINE_METHODS))
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    out = {"paper": PAPER_TABLE2, "params": param_table(), "leave_one_out": {}}
    for held in MODELS:
        train = [m for m in MODELS if m != held]
        res = fit(data, train, rounds=args.rounds, max_nfev=args.max_nfev, prior_weight=args.prior_weight, log=log)
        pred = predict(data, res["values"], [held], res["allocator_overhead"]["value"])
        res["heldout_model"] = held
        res["heldout_cells"] = [
            {"model": m, "gpus": g, "method": meth, "paper_s": pv,
             "ours_s": pred[(m, g)][meth]["step_time_s"], "oom": pred[(m, g)][meth]["oom"]}
            for m, g, meth, pv in paper_cells([held])]
        out["leave_one_out"][held] = res
    res = fit(data, MODELS, rounds=args.rounds, max_nfev=args.max_nfev, prior_weight=args.prior_weight, log=log)
    out["all_rows"] = res
    out["seconds"] = round(time.time() - t0, 1)
    if args.write:
        write_presets(out)
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
