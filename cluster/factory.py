"""The one way to build an [`cluster.environment.Environment`][cluster.environment.Environment]: [`make_environment`][cluster.factory.make_environment] picks the
simulator, real execution (TensorFlow or PyTorch) or grappler for a prepared graph. It lives apart from
the interface it returns ([`cluster.environment`][cluster.environment]), which the implementations import, so no import
runs in a circle.
"""

from __future__ import annotations

from cluster.environment import ENVIRONMENTS, EnvOptions, Environment, _options
from cluster.spec import ClusterSpec
from compgraph.ir import Grouping


def sim_execution(prepared, options=None) -> str:
    """How the simulator executes ``prepared``'s step under the environment options ``options``
    ([`cluster.environment.EnvOptions`][cluster.environment.EnvOptions] or a dict; ``None``: the defaults): their ``execution``,
    or for ``auto`` ``eager`` for a PyTorch step (program order, [`cluster.eager`][cluster.eager]) and
    ``dataflow`` for a TensorFlow graph.

    Raises:
        ValueError: a bad option (names it).
    """
    execution = _options(options).execution
    if execution != "auto":
        return execution
    from cluster.torch_real import is_torch_step

    return "eager" if is_torch_step(prepared) else "dataflow"


def make_environment(kind: str, prepared, spec: ClusterSpec, options: EnvOptions | dict | None = None, *,
                     grouping: Grouping | None = None) -> Environment:
    """The environment of ``kind`` for a prepared graph on ``spec``: the one way to build one.

    Args:
        kind: ``sim``, ``real`` or ``grappler`` ([`ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]).
        prepared: a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] (``.graph``, ``.grouping``,
            ``.graph_def`` and ``.fetches``; ``real`` and ``grappler`` need the GraphDef).
        spec: the cluster.
        options: an [`EnvOptions`][cluster.environment.EnvOptions] or a dict of its fields.
        grouping: the groups placements are made of, instead of ``prepared.grouping`` (e.g.
            [`compgraph.grouping.colocation_grouping`][compgraph.grouping.colocation_grouping] for learners that group ops themselves).
    Returns:
        An [`Environment`][cluster.environment.Environment].
    Raises:
        ValueError: unknown ``kind`` (lists the valid ones); an unknown option or a bad value
            (names it); ``real`` or ``grappler`` without a GraphDef; a bad engine or op_times shape.
    """
    if kind not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {kind!r}; valid: {', '.join(ENVIRONMENTS)}")
    opts = _options(options)
    graph = prepared.graph
    groups = prepared.grouping if grouping is None else grouping
    if len(groups.op_group) != graph.num_ops:
        raise ValueError(f"grouping: covers {len(groups.op_group)} ops, the graph has {graph.num_ops}")
    if kind == "sim":
        from cluster.simulated import SimulatedEnvironment

        op_times = opts.op_times
        if opts.cost_table is not None:
            if op_times is None:
                op_times = opts.cost_table.op_times(graph, spec)
            spec = opts.cost_table.apply_link(spec)
        return SimulatedEnvironment(graph, groups, spec, engine=opts.engine, op_times=op_times,
                                    execution=sim_execution(prepared, opts))
    if kind == "real":
        from cluster.torch_real import TorchRealEnvironment, is_torch_step

        if is_torch_step(prepared):
            return TorchRealEnvironment(prepared, spec, grouping=groups, repeats=opts.repeats, warmup=opts.warmup,
                                        seed=opts.seed, threads=opts.threads, time_limit_s=opts.time_limit_s,
                                        int_bounds={**(getattr(prepared, "int_bounds", None) or {}),
                                                    **(opts.int_bounds or {})},
                                        devices=opts.devices, isolate=opts.isolate, host_memory=opts.host_memory)
    graph_def = getattr(prepared, "graph_def", None)
    if graph_def is None:
        raise ValueError(f"env {kind!r}: needs the TensorFlow GraphDef of the graph (a benchmark or --graph-def)")
    fetches = list(getattr(prepared, "fetches", ()) or ())
    if kind == "real":
        from cluster.real import RealEnvironment

        return RealEnvironment(graph, groups, spec, graph_def, fetches, steps=opts.steps,
                               warmup=1 if opts.warmup is None else opts.warmup,
                               soft_placement=opts.soft_placement, seed=opts.seed,
                               int_bounds={**(getattr(prepared, "int_bounds", None) or {}), **(opts.int_bounds or {})},
                               devices=opts.devices)
    from cluster.grappler import GrapplerEnvironment

    return GrapplerEnvironment(graph, groups, spec, graph_def, fetches)
