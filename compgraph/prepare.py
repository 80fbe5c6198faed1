"""Model -> op graph -> co-location groups: the preprocessing stage in one call."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from compgraph.grouping import group_ops
from compgraph.ir import Grouping, OpGraph
from compgraph.models import BENCHMARKS, Benchmark
from compgraph.tf_import import import_graph_def


@dataclass
class PreparedGraph:
    """A benchmark's training step, imported and grouped."""

    benchmark: Benchmark
    size: str
    config: BaseModel
    graph: OpGraph
    grouping: Grouping
    graph_def: object = None  #: the TensorFlow ``GraphDef`` the graph was imported from (for real execution)
    fetches: tuple[str, ...] = ()  #: op names one training step runs

    def stats(self) -> dict:
        """Op and group counts, total FLOPs (FLOP) and parameter bytes (bytes)."""
        from compgraph.costs import unknown_flop_types

        return {
            "model": self.benchmark.name,
            "size": self.size,
            "ops": self.graph.num_ops,
            "edges": len(self.graph.edges),
            "groups": self.grouping.num_groups,
            "grouper": self.grouping.grouper,
            "total_flops": self.graph.total_flops(),
            "param_bytes": self.graph.total_param_bytes(),
            "ops_without_gpu_kernel": sum(not op.gpu_kernel for op in self.graph.ops),
            "op_types_without_flops_rule": unknown_flop_types([op.type for op in self.graph.ops]),
        }


def prepare(model: str, size: str = "small") -> PreparedGraph:
    """Build, import and group a benchmark's training step.

    Raises:
        ValueError: for an unknown model or size (the message lists the valid ones).
    """
    if model not in BENCHMARKS:
        raise ValueError(f"unknown model {model!r}; valid: {', '.join(BENCHMARKS)}")
    bench = BENCHMARKS[model]
    if size not in bench.sizes:
        raise ValueError(f"unknown size {size!r} for {model}; valid: {', '.join(bench.sizes)}")
    config = bench.sizes[size]
    graph_def, fetches = bench.build(config)
    graph = import_graph_def(graph_def, fetches, name=model)
    grouping = group_ops(graph, bench.model_rule, grouper="2017")
    return PreparedGraph(bench, size, config, graph, grouping, graph_def, tuple(fetches))
