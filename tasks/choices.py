"""Parameter types of the flows, so that the Prefect UI form shows dropdowns: ``Literal`` types built
from the registries (benchmarks, sizes, preset clusters, environments, groupers), so a name added to
a registry appears in the form without an edit here."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from cluster.environment import ENVIRONMENTS
from cluster.fidelity import AGAINST
from cluster.spec import preset_names
from cluster.tables import ROWS
from cluster.tables import TABLES as PAPER_TABLES
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
    from placer import LEARNER_NAMES  # names only: torch is not loaded for a form or a typo

    return (*BASELINES, *LEARNER_NAMES)


MethodName = Literal[_method_names()]  # type: ignore[valid-type]
"""A baseline of :data:`baselines.BASELINES` or a learner of :data:`placer.LEARNERS`."""


def _learner_names() -> tuple[str, ...]:
    from placer import LEARNER_NAMES

    return LEARNER_NAMES


LearnerName = Literal[_learner_names()]  # type: ignore[valid-type]
"""A learner of :data:`placer.LEARNERS`."""

AgainstName = Literal[AGAINST]  # type: ignore[valid-type]
"""The reference of a fidelity measurement (:data:`cluster.fidelity.AGAINST`): real runs or grappler's cost model."""

TABLES = (*PAPER_TABLES, "all")
"""The paper tables ``placement-reproduce`` reproduces (:data:`cluster.tables.TABLES`), or ``all``."""

TableName = Literal[TABLES]  # type: ignore[valid-type]
"""A paper table of :data:`TABLES`."""

TABLE_MODELS = tuple(dict.fromkeys(r.model for r in ROWS))
TableModel = Literal[TABLE_MODELS]  # type: ignore[valid-type]
"""A model of a row of the papers' tables (:data:`cluster.tables.ROWS`)."""

GpuCount = Literal[tuple(sorted({r.gpus for r in ROWS}))]  # type: ignore[valid-type]
"""A GPU count of a row of the papers' tables (2, 4 or 8)."""


def _table_methods() -> tuple[str, ...]:
    from placer import LEARNER_NAMES

    return LEARNER_NAMES


TABLE_METHODS = _table_methods()
"""The learners a ``placement-reproduce`` row can search (beside the table's baselines, which always run)."""

TableMethod = Literal[TABLE_METHODS]  # type: ignore[valid-type]
"""A learner of :data:`TABLE_METHODS`."""


Count = Annotated[int, Field(ge=1)]
"""A count of at least 1 (placements, steps): the form's field has ``minimum: 1``."""

TracedSteps = Annotated[int, Field(ge=2)]
"""Traced or measured steps of which the first is dropped: at least 2."""

NonNegative = Annotated[int, Field(ge=0)]
"""A count or seed of at least 0 (0: none; seeds start at 0)."""

NonNegativeFloat = Annotated[float, Field(ge=0)]
"""A non-negative amount (GPUs per worker)."""
