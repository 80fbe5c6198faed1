"""Wall time of the 2017 search on Ray (Sec. 3.4) vs in-process: Ray start, 1 and 2 controllers x 4 workers, 1000 placements; prints JSON.

Usage: python benchmarks/distributed.py [BUDGET]
"""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from compgraph.prepare import prepare
from cluster.spec import load_cluster
from cluster.environment import make_environment
from placer.reinforce import ReinforceConfig, reinforce_search
from placer.distributed import distributed_reinforce_search, ray_session
budget = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
prep = prepare("rnnlm", "small"); spec = load_cluster("k80x2")
out = {"model": "rnnlm-small", "cluster": "k80x2", "budget": budget, "cpus": os.cpu_count()}
cfg4 = ReinforceConfig(budget=budget, k=4, seed=0)
env = make_environment("sim", prep.graph, prep.grouping, spec)
for k in (4, 8):
    t = time.perf_counter(); r = reinforce_search(env, cfg4.model_copy(update={"k": k}))
    out[f"in_process_k{k}_s"] = time.perf_counter() - t
    out[f"in_process_k{k}_best_step_time_s"] = r.best_step_time_s
t = time.perf_counter()
with ray_session(num_cpus=2):
    out["ray_start_s"] = time.perf_counter() - t
    for c in (1, 2):
        t = time.perf_counter()
        r = distributed_reinforce_search(prep, spec, cfg4, num_controllers=c)
        out[f"distributed_{c}x4_s"] = time.perf_counter() - t
        out[f"distributed_{c}x4_best_step_time_s"] = r.best_step_time_s
    t = time.perf_counter()
    r = distributed_reinforce_search(prep, spec, cfg4.model_copy(update={"budget": 8}), num_controllers=2)
    out["distributed_2x4_startup_only_s(budget 8)"] = time.perf_counter() - t
t = time.perf_counter()
with ray_session(num_cpus=2):
    pass
out["ray_start_and_shutdown_s"] = time.perf_counter() - t
print(json.dumps(out, indent=1))
