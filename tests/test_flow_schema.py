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
        if "properties" in props[name] or "discriminator" in props[name]:  # a section, or a choice of kinds
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


#: the labels Prefect's form (UI v2) gives the choices of a union: a choice's title, else its type's name
_TYPE_LABELS = {"null": "None", "string": "str", "boolean": "bool", "integer": "int", "number": "float", "array": "list",
                "object": "dict"}


def _unions(node, path: str = ""):
    """``(path, node)`` of every ``anyOf``/``oneOf`` under a schema node (defaults left out)."""
    if isinstance(node, dict):
        if "anyOf" in node or "oneOf" in node:
            yield path, node
        for key, value in node.items():
            if key != "default":
                yield from _unions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _unions(value, f"{path}[{i}]")


def _label(member: dict, definitions: dict) -> str:
    if "$ref" in member:
        member = {**definitions[member["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in member.items() if k != "$ref"}}
    return member.get("title") or member.get("format") or _TYPE_LABELS.get(member.get("type"), "Field")


@pytest.mark.parametrize("entrypoint", [e for e in CHOICES if "source" in CHOICES[e]])
def test_the_graph_source_is_a_choice_of_kinds_each_with_its_fields(entrypoint):
    """Prefect's form shows a union as one button per choice, labelled by the choice's title, and the
    chosen one's fields below: the source's choices are its kinds (the discriminator's values), and the
    benchmark kind has dropdowns of models and sizes."""
    schema = _flow(entrypoint).parameters.model_dump()
    source, definitions = schema["properties"]["source"], schema["definitions"]
    choices = source.get("oneOf") or source.get("anyOf")
    assert source["discriminator"]["propertyName"] == "kind"
    kinds = [definitions[c["$ref"].rsplit("/", 1)[-1]] for c in choices]
    assert [k["title"] for k in kinds] == [k["properties"]["kind"]["const"] for k in kinds]
    assert set(source["discriminator"]["mapping"]) == {k["title"] for k in kinds}
    assert {"benchmark", "graph_def", "saved_model", "keras", "torch"} <= {k["title"] for k in kinds}
    benchmark = next(k for k in kinds if k["title"] == "benchmark")["properties"]
    assert "rnnlm" in benchmark["model"]["enum"] and "paper" in benchmark["size"]["enum"]
    for kind in kinds:  # each kind's fields, with help text (markup-free: the form shows it as is)
        assert "``" not in kind["description"] and ":data:`" not in kind["description"], kind["description"]
        for name, prop in kind["properties"].items():
            assert name == "kind" or prop.get("description"), (kind["title"], name)


@pytest.mark.parametrize("entrypoint", list(CHOICES))
def test_no_none_toggle_on_plain_options(entrypoint):
    """A ``X | None`` option whose None means "the default" is X's plain input in the form: no null
    choice (Prefect's "Property is type None" toggle) and no null default, anywhere in the form (its
    sections and the learners' options included). Only an option whose default is not None keeps its
    null choice (None is a value of its own there, e.g. hierarchical's grad_bound: no bound). And no
    union's choices look alike (the cluster was "str | str")."""
    schema = _flow(entrypoint).parameters.model_dump()
    definitions = schema.get("definitions", {})
    for path, node in _unions({"properties": schema["properties"], "definitions": definitions}):
        members = node.get("anyOf") or node.get("oneOf")
        if {"type": "null"} in members:
            assert node.get("default") is not None, f"{entrypoint}: {path} has a None toggle: {json.dumps(node)[:300]}"
        labels = [_label(m, definitions) for m in members]
        assert len(set(labels)) == len(labels), f"{entrypoint}: {path}: choices {' | '.join(labels)}"
    for name, prop in _properties(_flow(entrypoint)).items():
        assert "null" not in json.dumps(prop["default"]), f"{entrypoint}: {name}'s default holds a null: {prop['default']}"


@pytest.mark.parametrize("entrypoint", list(CHOICES))
def test_the_forms_starting_values_pass_prefects_validation(entrypoint):
    """The custom-run form starts from each parameter's default and the deployment's parameters;
    Prefect checks the values against the schema before the run is created (the UI through
    /ui/schemas/validate, the server on create): they pass as they are."""
    from prefect.utilities.schema_tools import validate

    schema = _flow(entrypoint).parameters.model_dump()
    values = {name: prop["default"] for name, prop in schema["properties"].items()}
    deployments = [d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"] if d["entrypoint"] == entrypoint]
    for parameters in [{}, *(d.get("parameters", {}) for d in deployments)]:
        errors = validate({**values, **parameters}, schema, raise_on_error=False, preprocess=True)
        assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message[:200]}" for e in errors]


def test_an_empty_plain_option_is_none_and_an_unset_field_is_left_out_of_the_dump():
    """The flows turn a plain option left empty into None (tasks.choices.unset); the config's
    sections leave an unset field out of their dump (so the form's defaults hold no null), and
    validating the dump gives the same config, an explicit None of a field whose default is not
    None (hierarchical's grad_bound: no bound) included."""
    from tasks.choices import AUTO, unset
    from tasks.config import ExperimentConfig

    assert [unset(v) for v in ("", [], {}, None)] == [None] * 4
    assert unset("k80x2") == "k80x2" and unset(0) == 0 and unset(AUTO, AUTO) is None and unset("2017", AUTO) == "2017"
    config = ExperimentConfig(methods=["hierarchical"], learners={"hierarchical": {"grad_bound": None, "k": 4}},
                              grouping={"num_groups": 64}, tracking={"out_dir": "runs"})
    dump = config.model_dump(mode="json")
    assert "methods" in dump and "init_placement" not in dump and "grouper" not in dump["grouping"]
    assert dump["grouping"]["num_groups"] == 64 and dump["learners"]["hierarchical"]["grad_bound"] is None
    again = ExperimentConfig.model_validate(dump)
    assert again == config and again.grouping.grouper is None and again.learners.hierarchical.grad_bound is None
    assert again.learner_options == config.learner_options == {"hierarchical": {"grad_bound": None, "k": 4}}
