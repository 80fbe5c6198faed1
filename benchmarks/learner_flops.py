"""The FLOPs of one mini-batch of each learner, and the placements per CPU-second they allow on this core; prints JSON.

A learner whose mini-batch of ``k`` placements (its sampling and its update) makes matrix products
that take ``T`` CPU-seconds on this core with torch's kernels, each at its fastest, cannot place
faster than ``k / T`` placements per CPU-second with those kernels, whatever else it saves; at the
core's fastest product rate ``R`` (another kernel), ``k R / F`` for ``F`` FLOPs. The two bounds say
whether a speed target (issue 36 item 3: EAGLE 5 a CPU-second on nmt at its paper widths, the 2017
placer and the Hierarchical Planner 10) is reachable at a given width with the code's kernels, with
any kernel, or needs a narrower named option.

Per graph (``MODEL[/SIZE]:CLUSTER``, as ``benchmarks/learners.py``; default nmt paper on ``k80x4``,
2017 groups) and method (a learner, or ``--variant LABEL=LEARNER:FIELD=VALUE,...`` as there):

* ``gflop_per_batch``: the FLOPs of ``learner.sample(k)`` and ``learner.update`` on the simulator's
  times for one mini-batch of ``k`` placements, counted by ``torch.utils.flop_counter``'s formulas
  (matrix products, batched products, convolutions; 2 FLOP a multiply-add) and ours for
  matrix-vector products, ``addmm_`` and torch's CPU LSTM layers ([`counting_mode`]), the one mini-batch
  after a first one (Adam's state made). Elementwise work (the attention's ``sigmoid``, the LSTM's
  gates) is not counted, so this is a lower bound on the work and the bound below an upper bound on
  the speed.
* ``product_cpu_s_per_batch``: ``T``, those products run again one by one on copies of their
  arguments (one torch thread, as the experiment), each ``(op, shapes)`` timed at its best of 5 and
  counted as often as the mini-batch made it; ``product_gflop_s`` their rate.
* ``bound_placements_per_cpu_s``: ``k / T``, with torch's kernels as the learner calls them.
* ``core_bound_placements_per_cpu_s``: ``k`` over the FLOPs at this core's fastest product
  (``core_gflop_s``, [`core_rate`]: torch's ``mm`` or oneDNN's ``mkldnn_linear``, a decoder step's
  shape or a square one): what the same arithmetic would allow if every product ran at that rate.
* ``gflop_sampling``, ``gflop_update``: the two parts of ``gflop_per_batch``.
* ``measured_placements_per_cpu_s``: ``k`` per process CPU-second of ``--batches`` mini-batches
  (sampling, the simulator, the update; counting off), as the experiment's ``placements_per_cpu_s``.

    python benchmarks/learner_flops.py [--graphs nmt:k80x4] [--methods eagle,eagle_ce,rl,hierarchical]
        [--variant LABEL=LEARNER:FIELD=VALUE,...] [--batches 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from learners import parse_graph, parse_variants  # noqa: E402  (this folder's benchmark: the same flags)

def counting_mode():
    """A ``TorchDispatchMode`` that records every op ``torch.utils.flop_counter``'s registry has a formula
    for (matrix products, batched products, convolutions), and those it lacks that the learners call:
    a matrix-vector product (``mv``, ``addmv``), the in-place ``addmm_``, and torch's CPU LSTM layer
    (``aten.mkldnn_rnn_layer``: ``2 x rows x (|W_ih| + |W_hh|)`` forward, twice that backward).

    ``calls`` maps ``(op, argument shapes, strides and dtypes)`` to ``[count, FLOPs each, one call's
    positional arguments, its keyword arguments]``, the tensors copied with their strides, to time
    the op again ([`product_seconds`]). It counts under ``torch.no_grad`` too (a learner's sampling) and
    the backward pass autograd runs on this thread (CPU)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten

    def shape(x):
        return x.shape if isinstance(x, torch.Tensor) else x

    def layout(x):
        return (tuple(x.shape), x.stride(), x.dtype) if isinstance(x, torch.Tensor) else x

    def rnn_layer(input_shape, w_ih, w_hh, *args, out_val=None, **kwargs) -> int:
        """One direction of one layer of torch's CPU LSTM/GRU (``aten.mkldnn_rnn_layer``): every row
        (time step x batch) of the input multiplies ``W_ih`` and ``W_hh``."""
        rows = math.prod(input_shape[:-1])
        return 2 * rows * (math.prod(w_ih) + math.prod(w_hh))

    def mv(matrix, *args, out_val=None, **kwargs) -> int:
        return 2 * math.prod(matrix)

    formulas = {**flop_registry, aten.mkldnn_rnn_layer: rnn_layer,
                # its backward: the gradients of the input and hidden state, and of both weights
                aten.mkldnn_rnn_layer_backward: lambda *a, **k: 2 * rnn_layer(*a, **k),
                aten.mv: mv, aten.addmv: lambda bias, *a, **k: mv(*a, **k), aten.addmm_: flop_registry[aten.addmm]}

    def copy(x):
        """A copy of tensor ``x`` with its strides: its base cloned, viewed as ``x`` views it."""
        if not isinstance(x, torch.Tensor):
            return x
        base = x._base if x._base is not None else x
        if base.is_contiguous():
            return base.detach().clone().as_strided(x.size(), x.stride(), x.storage_offset())
        return x.detach().clone()

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: dict = {}

        @property
        def flops(self) -> int:
            return sum(n * f for n, f, _, _ in self.calls.values())

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = formulas.get(func._overloadpacket)
            if formula is not None:
                key = (func, repr(tree_map(layout, (args, kwargs))))
                if key not in self.calls:
                    flops = int(formula(*tree_map(shape, args), **tree_map(shape, kwargs), out_val=tree_map(shape, out)))
                    self.calls[key] = [0, flops, tree_map(copy, args), tree_map(copy, kwargs)]
                self.calls[key][0] += 1
            return out

    return Counting()


def best_seconds(call, repeats: int, seconds: float) -> float:
    """The CPU-seconds (process time; one torch thread) of one ``call()`` at its fastest: the best of
    ``repeats`` timings, each of about ``seconds`` of calls, after one untimed call."""
    call()
    t0 = time.process_time()
    call()
    reps = max(1, int(seconds / max(time.process_time() - t0, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(reps):
            call()
        best = min(best, max(time.process_time() - t0, 1e-9) / reps)
    return best


def product_seconds(calls: dict, repeats: int = 5, seconds: float = 0.02) -> float:
    """The CPU-seconds the recorded products of [`counting_mode`] take on this core when each runs at
    its fastest: per ``(op, shapes)``, its count times [`best_seconds`] of the op on the recorded
    arguments, summed. A lower bound on the CPU time of the calls that recorded them: the same
    products, none of the work between them."""
    return sum(count * best_seconds(lambda f=func, a=args, k=kwargs: f(*a, **k), repeats, seconds)
               for (func, _), (count, _, args, kwargs) in calls.items())


#: ``(m, k, n)`` of the products [`core_rate`] times: a paper-width decoder step (a batch of 10, width
#: 512, the LSTM's 4 gates and the attention's query: 2,560 columns) and a square product
CORE_SHAPES = ((10, 512, 2560), (1024, 1024, 1024))


def core_rate(shapes=CORE_SHAPES, repeats: int = 5, seconds: float = 0.05) -> tuple[float, str]:
    """This core's fastest matrix product on one thread: ``(FLOP per CPU-second, "kernel m x k x n")``,
    [`best_seconds`] of each shape in ``shapes`` with torch's ``mm`` (what the learners
    call) and oneDNN's ``mkldnn_linear`` (when torch has oneDNN), ``2 m k n`` FLOP a product."""
    import torch

    best, at = 0.0, ""
    for m, k, n in shapes:
        a, w = torch.randn(m, k), torch.randn(n, k)
        kernels = {"mm": lambda a=a, w=w: a @ w.T}
        if torch.backends.mkldnn.is_available():
            am, wm = a.to_mkldnn(), w.to_mkldnn()
            kernels["mkldnn_linear"] = lambda am=am, wm=wm: torch._C._nn.mkldnn_linear(am, wm)
        for name, product in kernels.items():
            rate = 2.0 * m * k * n / best_seconds(product, repeats, seconds)
            if rate > best:
                best, at = rate, f"{name} {m} x {k} x {n}"
    return best, at


def one_batch(learner, env, sampling=None, update=None) -> None:
    """Sample one mini-batch of ``learner``, measure it on ``env`` and update on the times (OOM as OOM),
    the sampling inside the context ``sampling`` and the update inside ``update`` when given."""
    import contextlib

    import numpy as np

    with sampling or contextlib.nullcontext():
        samples = learner.sample(learner.batch_size)
    measured = env.measure_batch(samples.placements)
    oom = np.array([m.oom or m.step_time_s is None for m in measured])
    times = np.array([0.0 if m.step_time_s is None else m.step_time_s for m in measured])
    with update or contextlib.nullcontext():
        learner.update(samples, times, oom)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="nmt:k80x4", help="MODEL[/SIZE]:CLUSTER,... (size: paper unless given)")
    ap.add_argument("--methods", default="eagle,eagle_ce,rl,hierarchical")
    ap.add_argument("--variant", action="append", default=[], help="LABEL=LEARNER:FIELD=VALUE[,FIELD=VALUE]: a named option as its own row")
    ap.add_argument("--batches", type=int, default=2, help="mini-batches timed per method (after the counted one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--cache-dir", default="placement-runs/graph-cache")
    args = ap.parse_args(argv)
    if args.batches < 1:
        raise SystemExit(f"--batches: {args.batches}; expected at least 1")

    import torch

    from cluster.factory import make_environment
    from cluster.fast_simulator import load_kernel
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare
    from placer import LEARNERS
    from tasks.search import learner_grouping, warm_start_config

    torch.set_num_threads(1)
    methods = {m: (m, {}) for m in filter(None, args.methods.split(","))}
    for m in methods:
        if m not in LEARNERS:
            raise SystemExit(f"--methods: unknown {m!r}; valid: {', '.join(LEARNERS)}")
    methods.update(parse_variants(args.variant, LEARNERS))
    rate, rate_at = core_rate()
    out: dict = {"torch_threads": 1, "core_gflop_s": rate / 1e9, "core_rate_at": rate_at, "load_avg_1m_at_start": os.getloadavg()[0], "runs": []}
    for item in args.graphs.split(","):
        model, size, cluster = parse_graph(item)
        prepared = prepare(model, size, grouper="2017", cache_dir=args.cache_dir)
        spec = load_cluster(cluster)
        load_kernel(spec)
        starts: dict = {}
        for label, (name, options) in methods.items():
            cls = LEARNERS[name]
            env = make_environment("sim", prepared, spec, grouping=learner_grouping(name, prepared, cls.Config(**options)))
            config, _ = warm_start_config(name, cls.Config(seed=args.seed, **options), prepared, spec, "sim", cache=starts)
            learner = cls(env, config)
            one_batch(learner, env)  # the optimizer's state and first-call costs, outside both figures
            sampling, update = counting_mode(), counting_mode()
            one_batch(learner, env, sampling, update)
            cpu = time.process_time()
            for _ in range(args.batches):
                one_batch(learner, env)
            cpu = time.process_time() - cpu
            k, flops = learner.batch_size, sampling.flops + update.flops
            products = product_seconds(sampling.calls) + product_seconds(update.calls)
            row = {"graph": item, "method": label, "learner": name, "options": options, "units": env.grouping.num_groups,
                   "k": k, "gflop_per_batch": flops / 1e9, "gflop_sampling": sampling.flops / 1e9,
                   "gflop_update": update.flops / 1e9, "gflop_per_placement": flops / 1e9 / k,
                   "product_cpu_s_per_batch": products, "product_gflop_s": flops / products / 1e9 if products else None,
                   "bound_placements_per_cpu_s": k / products if products else None,
                   "core_bound_placements_per_cpu_s": k * rate / flops if flops else None,
                   "measured_placements_per_cpu_s": k * args.batches / cpu if cpu > 0 else None,
                   "load_avg_1m": os.getloadavg()[0]}
            out["runs"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
