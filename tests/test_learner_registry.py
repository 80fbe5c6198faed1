"""A learner's name lives in one place (issue 38 item 5): its entry in ``placer.configs.LEARNER_REGISTRY``.
The classes, ``placer.LEARNER_NAMES``, the warm-started variants and the forms' choices are read from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from placer import LEARNER_NAMES, LEARNERS
from placer.configs import CONFIGS, LEARNER_REGISTRY, learner_name
from placer.learner import Learner, LearnerConfig, register
from placer.warm import WARM_SUFFIX

ROOT = Path(__file__).resolve().parents[1]


def test_every_name_comes_from_the_registry():
    assert list(LEARNER_NAMES) == [*LEARNER_REGISTRY, *(n + WARM_SUFFIX for n in LEARNER_REGISTRY)]
    assert list(LEARNERS)[: len(LEARNER_NAMES)] == list(LEARNER_NAMES)
    for name in LEARNER_NAMES:
        assert LEARNERS[name].name == name and learner_name(LEARNERS[name].Config) == name
        assert LEARNERS[name].Config is CONFIGS[name]
    for name, (module, _) in LEARNER_REGISTRY.items():
        assert LEARNERS[name].__module__ == f"placer.{module}"


def test_the_forms_choices_are_the_registrys():
    from tasks.choices import LearnerName

    assert set(get_args(LearnerName)) == set(LEARNER_NAMES)


@pytest.mark.parametrize("name", [n for n in LEARNER_REGISTRY if len(n) > 3])  # 'rl', 'ce'... are also other words
def test_a_learners_name_is_written_once_in_the_code(name):
    """As a string literal in the learners, tasks, CLI and flows, only in its registry entry. Named
    selections of learners (``DEFAULT_LEARNERS = (...)``: which learners a command runs) choose among
    the registered names and are not definitions; the paper tables of ``cluster/tables.py`` are data."""
    hits = []
    for folder in ("placer", "tasks", "cli", "flows"):
        for path in (ROOT / folder).rglob("*.py"):
            for line in path.read_text().splitlines():
                if re.match(r"\s*[A-Z_]+_LEARNERS = \(", line):
                    continue
                if re.search(rf"[\"']{re.escape(name)}[\"']", line):
                    hits.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert hits and all(h.startswith("placer/configs.py: ") for h in hits), hits  # the registry (names and modules)
    assert sum(h.startswith(f'placer/configs.py: "{name}": (') for h in hits) == 1, hits


def test_register_refuses_a_name_that_contradicts_the_registry_and_an_unnamed_learner():
    class Renamed(LEARNERS["local_search"]):  # type: ignore[misc, valid-type]
        name = "hill_climber"

    with pytest.raises(ValueError, match="'hill_climber'.*registered as 'local_search'"):
        register(Renamed)

    class PluginConfig(LearnerConfig):
        pass

    class Unnamed(Learner):  # a plugin's learner outside the registry must name itself
        Config = PluginConfig

    with pytest.raises(ValueError, match="Unnamed: no name"):
        register(Unnamed)  # type: ignore[type-abstract]
