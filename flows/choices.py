"""Parameter types of the flows, so that the Prefect UI form shows dropdowns: ``Literal`` types built
from the registries (benchmarks, sizes, preset clusters, environments, groupers), so a name added to
a registry appears in the form without an edit here."""

from __future__ import annotations

from typing import Literal, Union

from cluster.environment import ENVIRONMENTS
from cluster.spec import preset_names
from compgraph.grouping import GROUPERS
from compgraph.models import BENCHMARKS

ModelName = Literal[tuple(BENCHMARKS)]  # type: ignore[valid-type]
"""A benchmark of :data:`compgraph.models.BENCHMARKS` (``placement models``)."""

SizeName = Literal[tuple(dict.fromkeys(s for b in BENCHMARKS.values() for s in b.sizes))]  # type: ignore[valid-type]
"""A benchmark size (``small`` for demos, ``paper`` for the 2017 sizes; not every model has every size)."""

ClusterName = Union[Literal[tuple(preset_names())], str]  # type: ignore[valid-type]
"""A preset cluster (``placement clusters``) or the path of a YAML cluster spec."""

EnvName = Literal[tuple(ENVIRONMENTS)]  # type: ignore[valid-type]
"""A measurement environment of :data:`cluster.environment.ENVIRONMENTS`."""

GrouperName = Literal[tuple(GROUPERS)]  # type: ignore[valid-type]
"""A grouper of :data:`compgraph.grouping.GROUPERS`."""


def _method_names() -> tuple[str, ...]:
    from baselines import BASELINES
    from placer import LEARNERS

    return (*BASELINES, *LEARNERS)


MethodName = Literal[_method_names()]  # type: ignore[valid-type]
"""A baseline of :data:`baselines.BASELINES` or a learner of :data:`placer.LEARNERS`."""
