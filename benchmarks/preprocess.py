"""Wall time and peak memory to build, import and group each paper-size benchmark.

Usage: ``python benchmarks/preprocess.py [--models rnnlm,nmt,...] [--sizes paper,large]``.
Each (model, size) runs in a fresh Python process so that its peak resident memory
(``ru_maxrss`` of the child, bytes) is its own; the wall time covers building the
TensorFlow training step, importing it into the op graph and the 2017 grouping, and then,
separately timed, the automatic groupers (METIS and fluid communities to 256 groups).
Prints one JSON object. The issue's limits: each under 2 minutes and 8 GiB on a 2-core
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, time, sys
t0 = time.perf_counter()
from compgraph.prepare import prepare
from compgraph.grouping import group
t1 = time.perf_counter()
p = prepare(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
auto = {}
for g in ("metis", "fluid"):
    s = time.perf_counter()
    auto[g] = {"groups": group(p.graph, g, None, 256, 0).num_groups, "seconds": time.perf_counter() - s}
st = p.stats()
print(json.dumps({
    "ops": st["ops"], "groups_2017": st["groups"], "total_flops": st["total_flops"],
    "param_bytes": st["param_bytes"], "op_types_without_flops_rule": st["op_types_without_flops_rule"],
    "import_libraries_s": t1 - t0, "build_import_group_s": t2 - t1, "automatic_groupers": auto,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}))
"""


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from compgraph.models import BENCHMARKS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(BENCHMARKS))
    ap.add_argument("--sizes", default="paper,large")
    args = ap.parse_args()
    out: dict = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}, "runs": []}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    for model in args.models.split(","):
        if model not in BENCHMARKS:
            out["runs"].append({"model": model, "error": f"unknown model; valid: {', '.join(BENCHMARKS)}"})
            continue
        for size in args.sizes.split(","):
            if size not in BENCHMARKS[model].sizes:
                continue
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", CHILD, model, size], capture_output=True, text=True, env=env, cwd=ROOT)
            row = {"model": model, "size": size, "process_wall_s": time.perf_counter() - start}
            if proc.returncode != 0:
                row["error"] = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            else:
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                row["under_limits"] = row["build_import_group_s"] < 120 and row["peak_rss_bytes"] < 8 * 2**30
            out["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    out["machine"]["loadavg_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
