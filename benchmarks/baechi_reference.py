"""Our m-TOPO / m-ETF / m-SCT (:mod:`baselines.baechi`) beside Baechi's own code, in our simulator.

Runs the authors' placers (github.com/beomyeol/baechi, ``placer/m_topo.py``, ``placer/m_etf.py``,
``placer/m_sct.py``; a checkout given with ``--baechi``, nothing of it is copied here) on our
op graphs, maps their placements back to our ops and measures both placements with
``make_environment("sim", ...)``. Prints the table (graph, cluster, algorithm, ours, theirs,
ours / theirs) and writes JSON to ``--out``. Not used by the tests (it needs the checkout).

    git clone https://github.com/beomyeol/baechi /tmp/baechi
    PYTHONPATH=. python benchmarks/baechi_reference.py --baechi /tmp/baechi --out placement-runs/baechi-reference.json

How our graph becomes theirs (what their ``placer_lib.DefaultPlacer`` builds from a TensorFlow
graph and its cost dict, with the defaults of ``placer_lib`` and ``train.py``: placer type
``default``, grouper ``tf``, adjuster ``noop``, memory fraction 1):

* one node per op: ``weight`` its time on a GPU in microseconds (every device is a K80 GK210 here,
  Baechi's model has one time per op), ``temporary_memory`` 0, ``output_memory`` the op's
  ``output_bytes`` scaled to its ``alloc_bytes`` (0 for aliasing ops) with the ``param_bytes`` of
  a variable added to its first output, ``persistent_memory`` its ``param_bytes`` (so their op
  memory is our ``alloc_bytes + param_bytes``), ``colocation_group`` its colocation unit
  (:func:`compgraph.grouping.colocation_units`, what their ``TFColocationGrouper`` merges);
* one edge per (producer, consumer) pair with one tensor per distinct output (``name:k``) and
  ``^name`` for a control edge (4 bytes, as their ``_add_edges``); a tensor's ``weight`` (their
  ``comm_cost_fn``) is our transfer time between two GPUs, ``latency + bytes / bandwidth`` of
  ``spec.link`` (the effective link the simulator charges), in microseconds; the edge's
  ``weight`` is the sum over its tensors;
* the device graph (their ``create_device_graph``): the GPUs, ``memory_limit`` their
  ``memory_bytes``; then their ``prune_dangling_ops`` and ``assign_topo_order``;
* m-TOPO ``m_topo(colocation=True)`` (``TopoUniformWithColocation``), m-ETF
  ``m_etf(colocation=True)``, m-SCT ``m_sct(threshold=--sct-threshold, colocation=True)``; the
  threshold defaults to their ``--sct_threshold`` flag, 0.1 (the function's own default is 0.5).
* Their favorite-child LP calls MOSEK through cvxopt (``solvers.lp(..., solver='mosek')``); the
  driver stands in a small ``cvxopt`` shim that solves the same LP with HiGHS (scipy), as MOSEK
  would, to a basic optimal solution. Their imports of TensorFlow and matplotlib (unused by the
  placers) are stubbed.

Their code runs in a subprocess with only the checkout on ``sys.path`` (their ``placer``
package shadows ours).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

ALGORITHMS = ("m_topo", "m_etf", "m_sct")

# What runs in the subprocess, against their checkout (our driver, not their code).
DRIVER = r'''
import pickle, sys, time, types, logging
logging.disable(logging.INFO)
for name in ("tensorflow", "tensorflow.core", "tensorflow.core.framework", "tensorflow.core.framework.attr_value_pb2",
             "matplotlib", "matplotlib.pyplot"):
    sys.modules.setdefault(name, types.ModuleType(name))
import numpy as np
import scipy.optimize, scipy.sparse
cvx = types.ModuleType("cvxopt")
cvx.matrix = lambda values: np.asarray(values, dtype=float)
def _spmatrix(values, rows, cols):
    return scipy.sparse.coo_matrix((np.asarray(values, float), (np.asarray(rows), np.asarray(cols)))).tocsr()
cvx.spmatrix = _spmatrix
def _lp(c, G, h, solver=None):
    G = scipy.sparse.csr_matrix(G, shape=(G.shape[0], len(c)))
    res = scipy.optimize.linprog(c, A_ub=G, b_ub=h, bounds=(None, None), method="highs")
    if res.status != 0:
        raise RuntimeError(res.message)
    return {"x": [float(v) for v in res.x]}
cvx.solvers = types.SimpleNamespace(lp=_lp)
sys.modules["cvxopt"] = cvx
from placer import placer_utils
from placer.m_topo import m_topo
from placer.m_etf import m_etf
from placer.m_sct import m_sct
job = pickle.load(open(sys.argv[1], "rb"))
op_graph, index = placer_utils.prune_dangling_ops(job["op_graph"])
placer_utils.assign_topo_order(op_graph)
out = {}
for alg in job["algorithms"]:
    t = time.perf_counter()
    if alg == "m_topo":
        g = m_topo(op_graph.copy(), job["device_graph"], colocation=True)
    elif alg == "m_etf":
        g = m_etf(op_graph.copy(), job["device_graph"], colocation=True)
    else:
        g = m_sct(op_graph.copy(), job["device_graph"], threshold=job["sct_threshold"], colocation=True)
    out[alg] = {"placement": {name: int(g.nodes[i]["p"]) for name, i in index.items()},
                "seconds": time.perf_counter() - t}
pickle.dump(out, open(sys.argv[2], "wb"))
'''


def to_baechi(graph, spec, op_times=None):
    """Our op graph and cluster as Baechi's placement graph and device graph (module docstring);
    ``op_times`` (``[num_ops, num_devices]`` seconds) instead of the cost model's.

    Returns:
        ``(op_graph, device_graph, gpus)``: networkx graphs (nodes named ``str(op index)``) and
        the spec indices of Baechi's devices ``0..len(gpus)-1``.
    """
    import networkx as nx

    from compgraph.grouping import colocation_units

    gpus = list(spec.gpu_indices) or list(range(len(spec.devices)))
    a, b = (gpus[0], gpus[1]) if len(gpus) > 1 else (gpus[0], gpus[0])
    link = spec.link(a, b) if a != b else None

    def comm_us(nbytes: int) -> float:
        return 0.0 if link is None else 1e6 * (link.latency_s + nbytes / link.bandwidth)

    from cluster.cost_model import op_time_matrix

    times = (op_time_matrix(graph, spec) if op_times is None else np.asarray(op_times, dtype=np.float64))[:, gpus[0]] * 1e6
    labels = colocation_units(graph).labels()
    g = nx.DiGraph()
    for i, op in enumerate(graph.ops):
        ob = [int(x) for x in op.output_bytes] or [0]
        tot = sum(ob)
        if op.alloc_bytes <= 0:
            out = [0] * len(ob)
        elif tot > 0:
            out = [int(round(op.alloc_bytes * x / tot)) for x in ob]
        else:
            out = [int(op.alloc_bytes)] + [0] * (len(ob) - 1)
        out[0] += int(op.param_bytes)
        g.add_node(i, id=i, name=str(i), weight=float(times[i]), temporary_memory=0,
                   persistent_memory=int(op.param_bytes), output_memory=out, colocation_group=f"unit{labels[i]}")
    eid = 0
    for e in sorted(graph.edges, key=lambda e: (e.dst, e.control)):  # per consumer, inputs then control inputs
        nbytes = 4 if e.control else int(e.bytes)
        name = f"^{e.src}" if e.control else f"{e.src}:{e.src_output}"
        tensor = {"name": name, "weight": comm_us(nbytes), "num_bytes": nbytes}
        if g.has_edge(e.src, e.dst):
            prev = g[e.src][e.dst]
            if all(t["name"] != name for t in prev["tensor"]):
                prev["weight"] += tensor["weight"]
                prev["tensor"].append(tensor)
        else:
            g.add_edge(e.src, e.dst, id=eid, weight=tensor["weight"], tensor=[tensor])
            eid += 1
    dg = nx.Graph()
    for k, d in enumerate(gpus):
        dg.add_node(k, id=k, name=spec.devices[d].name, size=0, memory_limit=int(spec.devices[d].memory_bytes))
    for i in dg.nodes:
        for j in dg.nodes:
            dg.add_edge(i, j, weight=0 if i == j else 1)
    return g, dg, gpus


def run_theirs(baechi: Path, graph, spec, algorithms=ALGORITHMS, sct_threshold: float = 0.1,
               timeout_s: float | None = None, op_times=None) -> dict:
    """Baechi's placers on our graph: ``{alg: {"placement": int64 [num_ops], "seconds": s}}``."""
    op_graph, dg, gpus = to_baechi(graph, spec, op_times)
    with tempfile.TemporaryDirectory() as tmp:
        job, res = Path(tmp, "job.pkl"), Path(tmp, "out.pkl")
        job.write_bytes(pickle.dumps({"op_graph": op_graph, "device_graph": dg, "algorithms": list(algorithms),
                                      "sct_threshold": sct_threshold}))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(baechi)
        subprocess.run([sys.executable, "-c", DRIVER, str(job), str(res)], cwd=str(baechi), env=env, check=True,
                       timeout=timeout_s)
        out = pickle.loads(res.read_bytes())
    cpus = spec.cpu_indices
    unit_cpu = {}
    from compgraph.grouping import colocation_units

    labels = colocation_units(graph).labels()
    for i, op in enumerate(graph.ops):
        if not op.gpu_kernel and cpus:
            unit_cpu[labels[i]] = cpus[0]
    result = {}
    for alg, r in out.items():
        place = np.full(graph.num_ops, gpus[0], dtype=np.int64)
        for name, k in r["placement"].items():
            place[int(name)] = gpus[k]
        for i in range(graph.num_ops):
            if labels[i] in unit_cpu:
                place[i] = unit_cpu[labels[i]]
        result[alg] = {"placement": place, "seconds": r["seconds"]}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baechi", required=True, type=Path, help="a checkout of github.com/beomyeol/baechi")
    ap.add_argument("--models", default="rnnlm,nmt,inception_v3")
    ap.add_argument("--clusters", default="k80x2,k80x4")
    ap.add_argument("--size", default="small")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--sct-threshold", type=float, default=0.1, help="theirs (placer_lib --sct_threshold default 0.1)")
    ap.add_argument("--out", default="placement-runs/baechi-reference.json")
    args = ap.parse_args()

    from baselines import baechi as ours
    from cluster.factory import make_environment
    from cluster.op_placement import OpPlacement, measure_placement
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    algorithms = args.algorithms.split(",")
    rows = []
    for model in args.models.split(","):
        prepared = prepare(model, size=args.size)
        for cluster in args.clusters.split(","):
            spec = load_cluster(cluster)
            env = make_environment("sim", prepared, spec)
            theirs = run_theirs(args.baechi, prepared.graph, spec, algorithms, args.sct_threshold)
            for alg in algorithms:
                t = time.perf_counter()
                mine = getattr(ours, alg)(prepared.graph, spec)
                ours_s = time.perf_counter() - t
                m_ours = measure_placement(env, OpPlacement(mine))
                m_theirs = measure_placement(env, OpPlacement(theirs[alg]["placement"]))
                row = {"graph": model, "size": args.size, "cluster": cluster, "algorithm": alg,
                       "ours_s": m_ours.step_time_s, "theirs_s": m_theirs.step_time_s,
                       "ratio": m_ours.step_time_s / m_theirs.step_time_s,
                       "ours_oom": bool(m_ours.oom), "theirs_oom": bool(m_theirs.oom),
                       "ours_seconds": ours_s, "theirs_seconds": theirs[alg]["seconds"],
                       "same_placement": bool(np.array_equal(mine, theirs[alg]["placement"])),
                       "ops_per_device_ours": np.bincount(mine, minlength=len(spec.devices)).tolist(),
                       "ops_per_device_theirs": np.bincount(theirs[alg]["placement"],
                                                            minlength=len(spec.devices)).tolist()}
                rows.append(row)
                print(f"{model:13s} {cluster:6s} {alg:7s} ours {row['ours_s']:.4f} s  theirs {row['theirs_s']:.4f} s  "
                      f"ratio {row['ratio']:.3f}", file=sys.stderr, flush=True)
    print("| graph | cluster | algorithm | ours (s) | theirs (s) | ours / theirs |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['graph']} ({r['size']}) | {r['cluster']} | {r['algorithm']} | {r['ours_s']:.4f} | "
              f"{r['theirs_s']:.4f} | {r['ratio']:.3f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"sct_threshold": args.sct_threshold, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
