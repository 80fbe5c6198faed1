"""Parameter types of the flows, so that the Prefect UI form shows dropdowns: ``Literal`` types built
from the registries (benchmarks, sizes, preset clusters, environments, groupers), so a name added to
a registry appears in the form without an edit here; and [`Unset`][tasks.choices.Unset], an option whose ``None``
means "the default", shown as a plain input."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, TypeVar, Union

from pydantic import Field

from cluster.environment import ENVIRONMENTS
from cluster.fidelity import AGAINST
from cluster.spec import preset_names
from cluster.tables import ROWS
from cluster.tables import TABLES as PAPER_TABLES
from compgraph.grouping import GROUPERS
from compgraph.models import BENCHMARKS

ModelName = Literal[tuple(BENCHMARKS)]  # type: ignore[valid-type]
"""A benchmark of [`compgraph.models.BENCHMARKS`][compgraph.models.BENCHMARKS] (``placement models``)."""

SizeName = Literal[tuple(dict.fromkeys(s for b in BENCHMARKS.values() for s in b.sizes))]  # type: ignore[valid-type]
"""A benchmark size (``small`` for demos, ``paper`` for the 2017 sizes; not every model has every size)."""

ClusterName = Union[Annotated[Literal[tuple(preset_names())], Field(title="preset")],  # type: ignore[valid-type]
                    Annotated[str, Field(title="YAML spec file")]]
"""A preset cluster (``placement clusters``) or the path of a YAML cluster spec (the form's two
choices, by these titles)."""

EnvName = Literal[tuple(ENVIRONMENTS)]  # type: ignore[valid-type]
"""A measurement environment of [`cluster.environment.ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]."""

GrouperName = Literal[tuple(GROUPERS)]  # type: ignore[valid-type]
"""A grouper of [`compgraph.grouping.GROUPERS`][compgraph.grouping.GROUPERS]."""

AUTO = "auto"
"""The choice of a form's dropdown that means "the default" (``None`` in Python)."""

GrouperChoice = Literal[(AUTO, *GROUPERS)]  # type: ignore[valid-type]
"""A grouper of [`compgraph.grouping.GROUPERS`][compgraph.grouping.GROUPERS], or ``auto``: 2017 for benchmarks, heuristic
for users' graphs (``None``)."""


def _method_names() -> tuple[str, ...]:
    from baselines import BASELINES
    from placer import LEARNER_NAMES  # names only: torch is not loaded for a form or a typo

    return (*BASELINES, *LEARNER_NAMES)


MethodName = Literal[_method_names()]  # type: ignore[valid-type]
"""A baseline of [`baselines.BASELINES`][baselines.BASELINES] or a learner of [`placer.LEARNERS`][placer.learner.LEARNERS]."""


def _learner_names() -> tuple[str, ...]:
    from placer import LEARNER_NAMES

    return LEARNER_NAMES


LearnerName = Literal[_learner_names()]  # type: ignore[valid-type]
"""A learner of [`placer.LEARNERS`][placer.learner.LEARNERS]."""

AgainstName = Literal[AGAINST]  # type: ignore[valid-type]
"""The reference of a fidelity measurement ([`cluster.fidelity.AGAINST`][cluster.fidelity.AGAINST]): real runs or grappler's cost model."""

TABLES = (*PAPER_TABLES, "all")
"""The paper tables ``placement-reproduce`` reproduces ([`cluster.tables.TABLES`][cluster.tables.TABLES]), or ``all``."""

TableName = Literal[TABLES]  # type: ignore[valid-type]
"""A paper table of [`TABLES`][tasks.choices.TABLES]."""

TABLE_MODELS = tuple(dict.fromkeys(r.model for r in ROWS))
TableModel = Literal[TABLE_MODELS]  # type: ignore[valid-type]
"""A model of a row of the papers' tables ([`cluster.tables.ROWS`][cluster.tables.ROWS])."""

TABLE_SIZE = "table"
"""The choice of ``placement-reproduce``'s size dropdown that means each row's own size (``None``)."""

TableSize = Literal[(TABLE_SIZE, *dict.fromkeys(s for b in BENCHMARKS.values() for s in b.sizes))]  # type: ignore[valid-type]
"""A benchmark size for every row of a paper table, or ``table``: each row's own."""

GpuCount = Literal[tuple(sorted({r.gpus for r in ROWS}))]  # type: ignore[valid-type]
"""A GPU count of a row of the papers' tables (2, 4 or 8)."""


def _table_methods() -> tuple[str, ...]:
    from placer import LEARNER_NAMES

    return LEARNER_NAMES


TABLE_METHODS = _table_methods()
"""The learners a ``placement-reproduce`` row can search (beside the table's baselines, which always run)."""

TableMethod = Literal[TABLE_METHODS]  # type: ignore[valid-type]
"""A learner of [`TABLE_METHODS`][tasks.choices.TABLE_METHODS]."""


Count = Annotated[int, Field(ge=1)]
"""A count of at least 1 (placements, steps): the form's field has ``minimum: 1``."""

TracedSteps = Annotated[int, Field(ge=2)]
"""Traced or measured steps of which the first is dropped: at least 2."""

NonNegative = Annotated[int, Field(ge=0)]
"""A count or seed of at least 0 (0: none; seeds start at 0)."""

NonNegativeFloat = Annotated[float, Field(ge=0)]
"""A non-negative amount (GPUs per worker)."""


T = TypeVar("T")


class _NoNullChoice:
    """``Annotated`` marker: the JSON schema (a Prefect form) of ``X | None`` is X's alone, without
    the null choice that Prefect shows as a "None" toggle ("Property is type None")."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        schema = dict(handler(core_schema))
        members = [m for m in schema.get("anyOf", []) if m != {"type": "null"}]
        if "anyOf" in schema and len(members) == 1:
            del schema["anyOf"]
            schema.update(members[0])
        elif "anyOf" in schema:
            schema["anyOf"] = members
        return schema


Unset = Annotated[Optional[T], _NoNullChoice()]
"""``X | None`` for a flow parameter whose ``None`` means "unset: use the default": the form shows
X's plain input (no "None" toggle). The parameter's default is X's empty value (``""``, ``[]``,
``{}``), which the flow turns into ``None`` with [`unset`][tasks.choices.unset]; Python callers (the CLI, the sweep)
may still pass ``None``. (The config models' optional fields need no marker: their form drops the
null choice itself, [`compgraph.frontends.form_schema`][compgraph.frontends.form_schema].)"""


def unset(value: Any, default: str | None = None) -> Any:
    """``None`` for a form's empty value (``""``, ``[]``, ``{}``: an [`Unset`][tasks.choices.Unset] parameter left
    empty) or for the dropdown's choice ``default`` that means it ([`AUTO`][tasks.choices.AUTO], [`TABLE_SIZE`][tasks.choices.TABLE_SIZE]),
    else ``value``."""
    if value is None or (isinstance(value, (str, list, tuple, dict)) and not value):
        return None
    return None if default is not None and value == default else value
