"""The Prefect UI form of every flow a deployment runs (prefect.yaml): every parameter has a default
and a description (docstring Args, which Prefect reads), and every parameter with choices is typed
with a Literal of tasks/choices.py, so the form shows a dropdown (``enum`` in the parameter schema).
No server: the schema is the one ``prefect deploy`` sends (``Flow.parameters``)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

#: flow entrypoint -> the parameters that have choices (a dropdown in the form)
CHOICES = {
    "flows/experiment.py:placement_experiment": {"source": "inception_v3", "cluster": "k80x2", "methods": "scotch",
                                                 "env": "sim", "grouping": "metis", "ray": "cuda"},
    "flows/sweep.py:placement_sweep": {"models": "nmt", "clusters": "k80x4", "base": "paper"},
    "flows/reproduce.py:placement_reproduce": {"table": "2017-table2", "models": "inception_v3", "gpus": 4,
                                               "methods": "eagle", "size": "paper"},
    "flows/measure.py:placement_calibrate": {"model": "rnnlm", "size": "small", "cluster": "cpu4"},
    "flows/measure.py:placement_fidelity": {"model": "rnnlm", "size": "small", "cluster": "cpu4", "against": "grappler"},
    "flows/measure.py:placement_train": {"source": "bert_base", "cluster": "cpu4", "method": "m_topo",
                                         "env": "real"},
    "flows/compare.py:compare_learners": {"source": "nmt", "cluster": "k80x2", "learners": "eagle",
                                          "env": "sim", "grouper": "fluid"},
}


def _flow(entrypoint: str):
    path, name = entrypoint.split(":")
    return getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)


def _inline(node, definitions: dict, seen: frozenset = frozenset()):
    """``node`` with every ``$ref`` to ``definitions`` replaced by the definition (a nested model
    of the config is a section of the form)."""
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        name = ref.rsplit("/", 1)[-1]
        if ref and name not in seen:
            return _inline({**definitions[name], **{k: v for k, v in node.items() if k != "$ref"}}, definitions, seen | {name})
        return {k: (v if k in ("default", "discriminator") else _inline(v, definitions, seen)) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, definitions, seen) for v in node]
    return node


def _properties(flow) -> dict:
    schema = flow.parameters.model_dump()
    return _inline(schema["properties"], schema.get("definitions", {}))


def _enums(node) -> list:
    """Every choice anywhere under a schema node (``enum``, or ``const`` for a one-choice Literal;
    under ``items``, ``anyOf``, ``oneOf`` and a section's ``properties``)."""
    if isinstance(node, dict):
        own = node.get("enum", []) + ([node["const"]] if "const" in node else [])
        return [*own, *(e for k, v in node.items() if k not in ("default", "enum") for e in _enums(v))]
    if isinstance(node, list):
        return [e for v in node for e in _enums(v)]
    return []


def test_every_deployment_runs_a_flow_checked_here():
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    assert {d["entrypoint"] for d in deployments} <= set(CHOICES)


@pytest.mark.parametrize("entrypoint", list(CHOICES))
def test_flow_parameters_have_defaults_descriptions_and_dropdowns(entrypoint):
    schema = _flow(entrypoint).parameters.model_dump()
    props = _properties(_flow(entrypoint))
    assert not schema.get("required"), f"{entrypoint}: parameters without a default: {schema.get('required')}"
    for name, prop in props.items():
        assert "default" in prop, f"{entrypoint}: {name} has no default"
        assert (prop.get("description") or "").strip(), f"{entrypoint}: {name} has no description"
    for name, example in CHOICES[entrypoint].items():
        assert example in _enums(props[name]), f"{entrypoint}: {name} has no dropdown with {example!r}: {json.dumps(props[name])}"
    # a parameter with a dropdown has its default among the choices (a section's defaults are checked field by field)
    for name in CHOICES[entrypoint]:
        if "properties" in props[name] or "oneOf" in props[name]:
            continue
        default, enums = props[name]["default"], _enums(props[name])
        for value in (default if isinstance(default, list) else [default]):
            if value is not None and not (name.startswith("cluster") and isinstance(value, str) and value.endswith(".yaml")):
                assert value in enums, f"{entrypoint}: default {name}={value!r} is not a choice"


def _numeric(prop: dict) -> list[dict]:
    """The integer or number schemas of a property: itself, its ``anyOf``/``oneOf`` members, its array
    items, and those of a section's fields."""
    nodes = [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]
    nodes += [n["items"] for n in list(nodes) if isinstance(n.get("items"), dict)]
    nodes += [x for n in list(nodes) for p in (n.get("properties") or {}).values() for x in _numeric(p)]
    return [n for n in nodes if n.get("type") in ("integer", "number")]


@pytest.mark.parametrize("entrypoint", list(CHOICES))
def test_every_count_in_the_form_has_a_minimum(entrypoint):
    """Budgets, seeds, steps, controllers, workers, group counts: the form refuses a negative (or
    zero) count before the run starts, instead of the run failing on it."""
    flow = _flow(entrypoint)
    props = _properties(flow)
    for name, prop in props.items():
        for node in _numeric(prop):
            if node.get("type") == "integer" and "enum" not in node and "const" not in node:
                assert "minimum" in node, f"{entrypoint}: {name} has no minimum: {json.dumps(prop)}"
    from prefect.exceptions import ParameterTypeError

    counts = [n for n, p in props.items() if any(x.get("minimum") == 1 for x in _numeric(p)) and p.get("type") == "integer"]
    for name in counts:
        with pytest.raises(ParameterTypeError, match=name):
            flow.validate_parameters({name: 0})
