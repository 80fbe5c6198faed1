"""Model -> op graph -> co-location groups: the preprocessing stage in one call.

[`prepare`][compgraph.prepare.prepare] does it for a registered benchmark (with an optional on-disk cache,
[`compgraph.cache`][compgraph.cache]), [`prepare_user_step`][compgraph.prepare.prepare_user_step] for a user's step, whatever its front end
([`compgraph.frontends`][compgraph.frontends]: a ``GraphDef`` file, a SavedModel, a Keras model).
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from compgraph import cache
from compgraph.grouping import check_grouper, default_num_groups, group
from compgraph.ir import Grouping, OpGraph
from compgraph.models import BENCHMARKS, Benchmark
from compgraph.tf_import import import_graph_def


class _LazyGraphDef:
    """Descriptor of [`PreparedGraph.graph_def`][compgraph.prepare.PreparedGraph.graph_def]: a value given as protobuf ``bytes`` (a
    cache hit) is parsed into a ``GraphDef`` on first access, so reading a cached graph
    does not import TensorFlow until the GraphDef is needed (real execution)."""

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None  # the dataclass field's default
        value = obj.__dict__.get("_graph_def")
        if isinstance(value, bytes):
            from compgraph.tf_env import import_tensorflow

            graph_def = import_tensorflow().compat.v1.GraphDef()
            graph_def.ParseFromString(value)
            obj.__dict__["_graph_def"] = value = graph_def
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__["_graph_def"] = value


@dataclass
class PreparedGraph:
    """A training step, imported and grouped.

    Attributes:
        benchmark: the registered benchmark, or ``None`` for a user's graph.
        size: the benchmark size (``small``, ``paper``...), ``"user"`` for a user's graph.
        config: the benchmark's size config, ``None`` for a user's graph.
        graph: the imported op graph.
        grouping: its co-location groups (``grouping.grouper`` names the grouper).
        graph_def: the TensorFlow ``GraphDef`` the graph was imported from (for real
            execution); may be given as its protobuf bytes, parsed on first access.
        fetches: op names one training step runs.
        import_info: how a user's graph was imported ([`compgraph.user_graph.UserStep.info`][compgraph.user_graph.UserStep.info]:
            format, inlined calls, unrolled loops, loops kept as one iteration) and what its
            costs miss ([`cost_coverage`][compgraph.prepare.cost_coverage]); empty for a benchmark.
        int_bounds: a user's graph: integer input name -> exclusive upper bound of the ids
            real execution feeds it (given, or read from the graph:
            [`compgraph.inputs.int_inputs`][compgraph.inputs.int_inputs]); empty for a benchmark (read when it runs).
        unbounded_int_inputs: a user's graph: integer inputs whose bound is neither given
            nor in the graph (real execution refuses them).
        torch_source: a user's PyTorch step: its [`compgraph.frontends.TorchSource`][compgraph.frontends.TorchSource], from which
            real execution captures and builds it again ([`cluster.torch_real`][cluster.torch_real]); ``None`` otherwise.
        framework: its front end's framework (``tf``, ``torch``, a plugin's), set by
            [`compgraph.frontends.prepare_source`][compgraph.frontends.prepare_source]; ``None`` when prepared without it.
    """

    benchmark: Benchmark | None
    size: str
    config: BaseModel | None
    graph: OpGraph
    grouping: Grouping
    graph_def: object = _LazyGraphDef()
    fetches: tuple[str, ...] = ()
    import_info: dict = field(default_factory=dict)
    int_bounds: dict = field(default_factory=dict)
    unbounded_int_inputs: tuple = ()
    torch_source: Any = None
    framework: str | None = None

    @property
    def name(self) -> str:
        """The benchmark's name, else the graph's name (a user's file stem or Keras spec)."""
        return self.benchmark.name if self.benchmark is not None else self.graph.name

    def stats(self) -> dict:
        """Op and group counts, total FLOPs (FLOP) and parameter bytes (bytes)."""
        from compgraph.costs import unknown_flop_types

        return {
            "model": self.name,
            "size": self.size,
            "ops": self.graph.num_ops,
            "edges": len(self.graph.edges),
            "groups": self.grouping.num_groups,
            "grouper": self.grouping.grouper,
            "total_flops": self.graph.total_flops(),
            "param_bytes": self.graph.total_param_bytes(),
            "ops_without_gpu_kernel": sum(not op.gpu_kernel for op in self.graph.ops),
            "op_types_without_flops_rule": unknown_flop_types([op.type for op in self.graph.ops]),
            **({"import": dict(self.import_info)} if self.import_info else {}),
        }

    def run_params(self) -> dict:
        """MLflow params saying how a user's graph was imported (``import_*``: format, loops
        unrolled, loops kept as one iteration, ops of unknown output size, ops without a FLOPs
        rule; [`cost_coverage`][compgraph.prepare.cost_coverage]); empty for a benchmark."""
        keys = ("format", "unrolled_loops", "unrolled_iterations", "one_iteration_loops", "inlined_calls",
                "ops_unknown_shape", "ops_without_flops_rule")
        return {f"import_{k}": self.import_info[k] for k in keys if k in self.import_info}

    def int_bound_problem(self) -> str | None:
        """Why real execution cannot feed this graph: the first integer input whose id range is
        neither given nor told by the graph, in one line naming it and ``--int-bound NAME=N``
        (the ``int_bounds`` key); ``None`` when every integer input is bounded."""
        if not self.unbounded_int_inputs:
            return None
        name = self.unbounded_int_inputs[0]
        return (f"{self.name}: integer input {name!r}: the graph does not tell the range of its ids "
                f"(no embedding table, logits or one-hot depth it reaches); give --int-bound {name}=N")

    def cost_warning(self) -> str | None:
        """One line saying what a user's graph's costs miss ([`cost_coverage`][compgraph.prepare.cost_coverage]), or ``None``
        when nothing is missing (and for a benchmark)."""
        info = self.import_info
        unknown, uncosted = info.get("ops_unknown_shape", 0), info.get("ops_without_flops_rule", 0)
        if not unknown and not uncosted:
            return None
        parts = []
        if unknown:
            parts.append(f"{unknown} of {self.graph.num_ops} ops have outputs of unknown size "
                         "(each unknown dimension counts as 1 in their bytes and FLOPs)")
        if uncosted:
            parts.append(f"{uncosted} ops have no FLOPs rule (0 FLOP): {info.get('op_types_without_flops_rule', '')}")
        return f"warning: {self.name}: " + "; ".join(parts)


def cost_coverage(graph: OpGraph) -> dict:
    """What the cost model does not know about a graph.

    Returns:
        ``ops_unknown_shape``: ops with an output of unknown rank or an unknown dimension
        (their bytes and FLOPs count each unknown dimension as 1); ``ops_without_flops_rule``:
        ops whose type has no FLOPs rule (counted as 0 FLOP); ``op_types_without_flops_rule``:
        those types, comma-separated (at most 240 characters).
    """
    from compgraph.costs import has_flop_rule

    unknown = sum(1 for op in graph.ops if any(s is None or -1 in s for s in op.output_shapes))
    uncosted = [op.type for op in graph.ops if not has_flop_rule(op.type)]
    return {"ops_unknown_shape": unknown, "ops_without_flops_rule": len(uncosted),
            "op_types_without_flops_rule": ",".join(sorted(set(uncosted)))[:240]}


def _int_bounds(graph_def, fetches, given: dict[str, int] | None, source: str) -> tuple[dict, list]:
    """``(bounds, unbounded)`` of a user's step's integer inputs: ``given`` (checked: each name an
    integer input, each bound >= 1) over what the graph tells ([`compgraph.inputs.int_inputs`][compgraph.inputs.int_inputs])."""
    from compgraph.tf_env import import_tensorflow
    from compgraph.user_graph import UserGraphError

    given = dict(given or {})
    for name, n in given.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UserGraphError(f"{source}: int bound {name}={n!r}: must be an integer >= 1")
    tf = import_tensorflow()
    ints = {n.name for n in graph_def.node if n.op in ("Placeholder", "PlaceholderV2")
            and tf.as_dtype(n.attr["dtype"].type).is_integer}
    found = {}
    if ints:
        from compgraph.inputs import int_inputs

        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        found = int_inputs(g, fetches)
    for name in given:
        if name not in found:
            raise UserGraphError(f"{source}: int bound {name}={given[name]}: no integer input {name!r} in the step; "
                                 f"its integer inputs: {', '.join(sorted(found)) or 'none'}")
    bounds = {name: given.get(name, b) for name, (_dtype, b) in found.items()}
    return {k: int(v) for k, v in bounds.items() if v}, sorted(k for k, v in bounds.items() if not v)


def canonical_control_inputs(graph_def) -> None:
    """Sort every node's control inputs (``^name``) by name, in place, after its data inputs.

    TensorFlow's builders (``tf.group``, optimizers' ``minimize``) list control inputs in
    an order that varies between builds of the same model in one process, which would
    make two builds of one step differ; the order of control inputs has no meaning."""
    for node in graph_def.node:
        data = [i for i in node.input if not i.startswith("^")]
        ctrl = sorted(i for i in node.input if i.startswith("^"))
        if list(node.input) != data + ctrl:
            del node.input[:]
            node.input.extend(data + ctrl)


def build_benchmark_graph(bench: Benchmark, config: BaseModel):
    """Build and import a benchmark's training step: ``(graph_def, fetches, OpGraph)``
    (control inputs in a canonical order: [`canonical_control_inputs`][compgraph.prepare.canonical_control_inputs]); a PyTorch
    benchmark's step is captured directly (``(None, [], OpGraph)``)."""
    if bench.framework == "torch":
        return None, [], bench.build(config)
    graph_def, fetches = bench.build(config)
    canonical_control_inputs(graph_def)
    graph = import_graph_def(graph_def, fetches, name=bench.name)
    return graph_def, list(fetches), graph


def prepare(
    model: str,
    size: str = "small",
    grouper: str = "2017",
    num_groups: int | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> PreparedGraph:
    """Build, import and group a benchmark's training step, through the cache if given.

    Args:
        model: a benchmark name ([`compgraph.models.BENCHMARKS`][compgraph.models.BENCHMARKS]).
        size: one of the benchmark's sizes.
        grouper: a grouper of [`compgraph.grouping.GROUPERS`][compgraph.grouping.GROUPERS].
        num_groups: target number of groups for ``metis``/``fluid``; ``None`` means
            [`compgraph.grouping.DEFAULT_NUM_GROUPS`][compgraph.grouping.DEFAULT_NUM_GROUPS] (256) for them; must be ``None``
            for ``heuristic`` and ``2017``.
        cache_dir: a folder for [`compgraph.cache`][compgraph.cache]: a matching entry is read instead of
            building; otherwise the result is built and written there. ``None``: no cache.
        seed: seed of the automatic groupers.
    Raises:
        ValueError: an unknown model, size or grouper (the message lists the valid ones),
            or a bad ``num_groups`` (see [`compgraph.grouping.group`][compgraph.grouping.group]).
    """
    if model not in BENCHMARKS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(BENCHMARKS)}")
    bench = BENCHMARKS[model]
    if size not in bench.sizes:
        raise ValueError(f"unknown size {size!r} for {model}; valid: {', '.join(bench.sizes)}")
    if num_groups is None:
        num_groups = default_num_groups(grouper)  # raises for an unknown grouper
    check_grouper(grouper, bench.model_rule, num_groups, model)
    config = bench.sizes[size]
    key = None
    if cache_dir is not None:
        key = cache.cache_key(model, size, grouper, num_groups, seed)
        hit = cache.load_entry(cache_dir, key)
        if hit is not None:
            return PreparedGraph(bench, size, config, hit.graph, hit.grouping, hit.graph_def_bytes, hit.fetches)
    graph_def, fetches, graph = build_benchmark_graph(bench, config)
    grouping = group(graph, grouper, bench.model_rule, num_groups, seed)
    if key is not None and cache_dir is not None:
        cache.save_entry(cache_dir, key, graph, grouping, graph_def, fetches)
    return PreparedGraph(bench, size, config, graph, grouping, graph_def, tuple(fetches))


def prepare_user_step(load, source: str, name: str, grouper: str = "heuristic", num_groups: int | None = None,
                      seed: int = 0, int_bounds: dict[str, int] | None = None) -> PreparedGraph:
    """Import and group a user's training step (the common part of every user front end,
    [`compgraph.frontends`][compgraph.frontends]): the grouper is checked first, then ``load()`` gives the step
    ([`compgraph.user_graph.UserStep`][compgraph.user_graph.UserStep]), which is imported, costed and grouped.

    Args:
        load: ``() -> UserStep``, the front end's loader.
        source: the text naming the source in error messages (a path, ``keras 'mod:fn'``).
        name: the graph's name.
        grouper: ``heuristic``, ``metis`` or ``fluid`` (a user's graph has no model rule).
        num_groups: as [`prepare`][compgraph.prepare.prepare] (``None``: 256 for ``metis``/``fluid``).
        seed: seed of the automatic groupers.
        int_bounds: integer input name -> exclusive upper bound of its ids for real execution,
            over what the graph tells (the table an input indexes).
    Returns:
        A [`PreparedGraph`][compgraph.prepare.PreparedGraph] with ``benchmark=None``, ``size="user"``, ``config=None`` and
        ``import_info`` set.
    Raises:
        ValueError: a bad grouper or ``num_groups`` (``2017`` needs a model rule).
        compgraph.user_graph.UserGraphError: the loader's, the importer rejects the graph (the
            message names the source), or an ``int_bounds`` entry names no integer input or is
            not an integer >= 1.
    """
    from compgraph.user_graph import UserGraphError

    if num_groups is None:
        num_groups = default_num_groups(grouper)
    check_grouper(grouper, None, num_groups, name)
    step = load()
    try:
        graph = import_graph_def(step.graph_def, step.fetches, name=name)
    except Exception as e:  # TensorFlow's import errors (unknown op types, bad attrs) and ours
        raise UserGraphError(f"{source}: import failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from e
    bounds, unbounded = _int_bounds(step.graph_def, step.fetches, int_bounds, source)
    grouping = group(graph, grouper, None, num_groups, seed)
    info = {**step.info, **cost_coverage(graph), "int_inputs": {**bounds, **{k: None for k in unbounded}}}
    return PreparedGraph(None, "user", None, graph, grouping, step.graph_def, tuple(step.fetches), info,
                         bounds, tuple(unbounded))
