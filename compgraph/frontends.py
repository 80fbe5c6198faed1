"""Graph sources and their front ends: one registry, one dispatch.

A *graph source* says where a training step comes from, as a small pydantic model with a
``kind``: a registered benchmark ([`BenchmarkSource`][compgraph.frontends.BenchmarkSource]), a TensorFlow ``GraphDef`` file
([`GraphDefSource`][compgraph.frontends.GraphDefSource]), a SavedModel signature ([`SavedModelSource`][compgraph.frontends.SavedModelSource]), a Keras
model built by the user's function ([`KerasSource`][compgraph.frontends.KerasSource]) or a PyTorch step ([`TorchSource`][compgraph.frontends.TorchSource]).
[`GraphSource`][compgraph.frontends.GraphSource] is their discriminated union (on ``kind``), built from the registry, so a
config or a JSON form holds any of them.

A *front end* ([`Frontend`][compgraph.frontends.Frontend], in [`FRONTENDS`][compgraph.frontends.FRONTENDS] by kind) owns everything
framework-specific: its source model, how a source becomes a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph],
its command-line flags ([`SourceFlag`][compgraph.frontends.SourceFlag]: every command that takes a graph gets them from
the registry, [`cli.options.graph_flags`][cli.options.graph_flags]), the environments it runs in, the export formats it
writes beside ``json`` and the class of each of its op types (dense, conv, other) that the cost
model reads. Nothing else asks which framework a graph is in: [`frontend_of`][compgraph.frontends.frontend_of],
[`environment_problem`][compgraph.frontends.environment_problem], [`export_formats`][compgraph.frontends.export_formats] and
[`op_class`][compgraph.frontends.op_class] ask the registry.

**Adding a front end** (ONNX, JAX...) is one module, one [`register`][compgraph.frontends.register] call and its tests:
a source model with a new ``kind``, a ``prepare`` (or a loader, [`user_frontend`][compgraph.frontends.user_frontend]), its
flags, environments, exports and op classes. A module named in ``$PLACEMENT_FRONTENDS``
(comma-separated) or in the entry-point group ``device_placement.frontends`` is imported when
this module is, before [`GraphSource`][compgraph.frontends.GraphSource] and the commands are built
([`load_plugins`][compgraph.frontends.load_plugins]); ``docs/extending.md`` shows a toy one.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from compgraph.prepare import PreparedGraph, prepare, prepare_user_step


_ROLE = re.compile(r":(?:py:)?[a-z]+:`~?([^`<]*?)\s*(?:<[^`>]+>)?`")  # a Sphinx role (its title, or its target)
_XREF = re.compile(r"\[`?([^`\]]+)`?\]\[[^\]]*\]")  # a mkdocstrings cross-reference: [`title`][target]


def form_text(text: str) -> str:
    """A docstring as a form shows it: its first paragraph on one line, cross-references (Sphinx
    roles, mkdocstrings references) as their titles and double-backquoted literals as their text."""
    first = re.split(r"\n\s*\n", text.strip())[0]
    return " ".join(_XREF.sub(r"\1", _ROLE.sub(r"\1", first)).replace("``", "").split())


def form_schema(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """``json_schema_extra`` of the models a Prefect form shows (the graph sources here, the
    experiment config and its sections in [`tasks.config`][tasks.config]).

    * The model's description is [`form_text`][compgraph.frontends.form_text] of its docstring.
    * A field ``X | None`` whose default ``None`` means "unset: use the default" is shown as X's
      plain input, without the null choice (Prefect's "Property is type None" toggle) and without a
      default: a field left empty is left out of the values, so it stays ``None``. Python still
      takes ``None``. A field whose default is not ``None`` keeps its null choice: there ``None``
      is a value of its own (e.g. no bound).
    """
    if schema.get("description"):
        schema["description"] = form_text(schema["description"])
    properties = schema.get("properties", {})
    for name, field in cls.model_fields.items():
        prop = properties.get(field.alias or name)
        if prop is None or field.is_required() or field.default is not None:
            continue
        prop.pop("default", None)
        members = [m for m in prop.get("anyOf", []) if m != {"type": "null"}]
        if "anyOf" in prop and len(members) < len(prop["anyOf"]):
            del prop["anyOf"]
            if len(members) == 1:
                for key, value in members[0].items():
                    prop.setdefault(key, value)
            else:
                prop["anyOf"] = members


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=form_schema)


def _benchmark_names() -> list[JsonValue]:
    from compgraph.models import BENCHMARKS

    return list(BENCHMARKS)


def _size_names() -> list[JsonValue]:
    from compgraph.models import BENCHMARKS

    return list(dict.fromkeys(s for b in BENCHMARKS.values() for s in b.sizes))


class BenchmarkSource(_Source):
    """A registered benchmark (``placement models``) at one of its sizes.

    The benchmarks of [`compgraph.models.BENCHMARKS`][compgraph.models.BENCHMARKS] and their sizes are offered as choices in
    a form's schema (``enum``); an unknown one is refused where the source is used
    ([`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig], [`compgraph.prepare.prepare`][compgraph.prepare.prepare]) with the valid ones
    listed."""

    model_config = ConfigDict(title="benchmark")

    kind: Literal["benchmark"] = "benchmark"
    model: str = Field("rnnlm", json_schema_extra={"enum": _benchmark_names()},
                       description="a benchmark of `placement models`")
    size: str = Field("small", json_schema_extra={"enum": _size_names()},
                      description="small (a demo in seconds), paper (the 2017 sizes), or a table's settings; not "
                                  "every model has every size")


class GraphDefSource(_Source):
    """A TensorFlow training step saved as a ``.pb``/``.pbtxt`` ``GraphDef``, flat or TF2 with a
    function library.

    ``fetches``: the op names one step runs (``None``: the graph's sinks without initializers)."""

    model_config = ConfigDict(title="graph_def")

    kind: Literal["graph_def"] = "graph_def"
    path: str = Field(description="the .pb or .pbtxt file")
    fetches: list[str] | None = Field(None, description="the op names one step runs (empty: the graph's sinks "
                                                        "without initializers)")


class SavedModelSource(_Source):
    """A TensorFlow SavedModel folder and the signature holding the training step.

    ``signature``: ``None`` for its only one."""

    model_config = ConfigDict(title="saved_model")

    kind: Literal["saved_model"] = "saved_model"
    path: str = Field(description="the SavedModel folder")
    signature: str | None = Field(None, description="the signature holding the training step (empty: its only one)")


class KerasSource(_Source):
    """A Keras model built by the user's function.

    ``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION`` returning ``(keras model, input specs)``,
    resolved from the current folder ([`compgraph.user_graph.resolve_user_function`][compgraph.user_spec.resolve_user_function])."""

    model_config = ConfigDict(title="keras")

    kind: Literal["keras"] = "keras"
    spec: str = Field(description="MODULE:FUNCTION or path/to/file.py:FUNCTION returning (keras model, input specs), "
                                  "from the current folder")


class TorchSource(_Source):
    """A PyTorch training step: the user's module and example inputs.

    ``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION`` returning ``(torch module, example_args)``, resolved from the current
    folder; ``module(*example_args)`` is the scalar training loss, and the captured step adds
    the backward and ``optimizer``'s update ([`compgraph.torch_step.load_torch_step`][compgraph.torch_step.load_torch_step])."""

    model_config = ConfigDict(title="torch")

    kind: Literal["torch"] = "torch"
    spec: str = Field(description="MODULE:FUNCTION or path/to/file.py:FUNCTION returning (torch module, example_args); "
                                  "module(*example_args) is the training loss")
    optimizer: Literal["sgd", "adam"] = Field("adam", description="the optimizer whose update the captured step adds")


def _benchmark(src: BenchmarkSource, grouper=None, num_groups=None, seed=0, cache_dir=None, int_bounds=None):
    if int_bounds:
        raise ValueError("int_bounds: for a user's graph only; a benchmark's integer inputs are bounded by its own tables")
    return prepare(src.model, src.size, grouper=grouper or "2017", num_groups=num_groups, cache_dir=cache_dir, seed=seed)


def _load_graph_def(src: GraphDefSource):
    from compgraph.user_graph import load_graph_def_step

    return load_graph_def_step(src.path, src.fetches)


def _load_saved_model(src: SavedModelSource):
    from compgraph.user_graph import load_saved_model_step

    return load_saved_model_step(src.path, src.signature)


def _load_keras(src: KerasSource):
    from compgraph.user_graph import load_keras_step

    return load_keras_step(src.spec)


@dataclass(frozen=True)
class SourceFlag:
    """One command-line flag of a front end, e.g. ``--graph-def`` setting ``GraphDefSource.path``.

    A front end's first flag chooses it (``--graph-def PATH``: a GraphDef source); its other flags
    refine it and are refused without the first (``--signature`` without ``--saved-model``). The
    default front end's (the benchmark's ``--model``, ``--size``) apply when no other is chosen.

    Attributes:
        name: the option's parameter name (``graph_def``); the flag is ``--graph-def``.
        field: the source model's field it sets (``path``).
        help: the ``--help`` text.
        repeated: a list of values (the flag given once per value).
        note: the error when given without its front end's first flag (default: ``NAME is for FIRST``).
    """

    name: str
    field: str
    help: str
    repeated: bool = False
    note: str = ""

    @property
    def flag(self) -> str:
        """The command-line flag: ``--`` and the name with dashes."""
        return "--" + self.name.replace("_", "-")


Environments = Union[frozenset, Callable[[Any], frozenset]]
"""The environments a front end's sources run in: a set, or ``source -> set`` (the benchmark's
depend on the model's framework)."""

ALL_ENVIRONMENTS = frozenset({"sim", "real", "grappler"})
"""The measurement environments of [`cluster.environment.ENVIRONMENTS`][cluster.environment.ENVIRONMENTS]."""


@dataclass(frozen=True)
class Exported:
    """What a front end's export writes: ``data`` (the file's bytes), the ``graph`` it placed (checked
    against the run's recorded hash before anything is written) and ``fetches`` (op names one step
    runs; empty where the format has none)."""

    data: bytes
    graph: Any
    fetches: tuple[str, ...] = ()


@dataclass(frozen=True)
class Frontend:
    """A framework's front end: how sources of one kind become a prepared graph, and everything
    else about them that is framework-specific.

    Attributes:
        kind: the sources' ``kind``.
        source: their pydantic model.
        prepare: ``prepare(source, grouper, num_groups, seed, cache_dir, int_bounds) -> PreparedGraph``
            (``grouper=None``: the front end's default).
        flags: its command-line flags ([`SourceFlag`][compgraph.frontends.SourceFlag]), the first one choosing it.
        environments: where its graphs are measured: ``sim``, ``real``, ``grappler`` (a set, or
            ``source -> set``); default the simulator only.
        framework: the framework's name (``tf``, ``torch``...), recorded with a run, or ``source -> name``.
        exports: export format -> ``export(source, placed, header, cache_dir) -> Exported``
            (``placed``: op name -> target device); ``json`` is every front end's
            ([`tracking.export`][tracking.export]). A ``source -> dict`` where it depends on the source.
        op_classes: op type -> ``dense`` | ``conv`` | ``other``, the cost model's compute class
            ([`cluster.cost_model.op_class`][cluster.cost_model.op_class]) of the types its importer writes; an op
            whose ``op_class`` the importer set is read as is.
        user: its sources are a user's graph (every kind but the benchmark).
        probe: ``probe(source)``, the command line's check before it prepares a user's function in
            process: that the function does not end its process
            ([`compgraph.user_spec.probe_user_function`][compgraph.user_spec.probe_user_function]); ``None``: none.
    """

    kind: str
    source: type[BaseModel]
    prepare: Callable[..., PreparedGraph]
    flags: tuple[SourceFlag, ...] = ()
    environments: Environments = frozenset({"sim"})
    framework: str | Callable[[Any], str] = ""
    exports: Mapping[str, Callable[..., Exported]] | Callable[[Any], Mapping[str, Callable[..., Exported]]] = \
        dc_field(default_factory=dict)
    op_classes: Callable[[str], str] | None = None
    user: bool = True
    probe: Callable[[Any], None] | None = None


FRONTENDS: dict[str, Frontend] = {}
"""Source kind -> [`Frontend`][compgraph.frontends.Frontend], in registration order."""

DEFAULT_KIND = "benchmark"
"""The front end a command uses when none of the others' first flags is given."""


def register(frontend: Frontend) -> Frontend:
    """Add ``frontend`` to [`FRONTENDS`][compgraph.frontends.FRONTENDS].

    Raises:
        ValueError: another front end already has its kind, or one of its flags.
    """
    if frontend.kind in FRONTENDS and FRONTENDS[frontend.kind] is not frontend:
        raise ValueError(f"front end kind {frontend.kind!r}: already registered")
    taken = {f.name: fe.kind for fe in FRONTENDS.values() if fe is not frontend for f in fe.flags}
    for f in frontend.flags:
        if f.name in taken:
            raise ValueError(f"front end {frontend.kind!r}: flag {f.flag} is already front end {taken[f.name]!r}'s")
    FRONTENDS[frontend.kind] = frontend
    return frontend


def user_frontend(kind: str, source: type[BaseModel], load: Callable[[Any], Any],
                  describe: Callable[[Any], tuple[str, str]], **options: Any) -> Frontend:
    """A front end of a user's graph: ``load(source)`` gives the step
    ([`compgraph.user_graph.UserStep`][compgraph.user_graph.UserStep]), ``describe(source)`` the text naming it in errors
    and the graph's name; the step is imported and grouped by
    [`compgraph.prepare.prepare_user_step`][compgraph.prepare.prepare_user_step] (default grouper ``heuristic``). ``options``:
    the other fields of [`Frontend`][compgraph.frontends.Frontend] (flags, environments...)."""

    def run(src, grouper=None, num_groups=None, seed=0, cache_dir=None, int_bounds=None) -> PreparedGraph:
        text, name = describe(src)
        return prepare_user_step(lambda: load(src), text, name, grouper or "heuristic", num_groups, seed, int_bounds)

    return Frontend(kind, source, run, **options)


def frontend_of(source: Any) -> Frontend:
    """The front end of ``source`` (by its ``kind``).

    Raises:
        ValueError: no front end has its kind (names it and the registered ones).
    """
    kind = getattr(source, "kind", None)
    if kind not in FRONTENDS:
        raise ValueError(f"source kind {kind!r}: no front end; valid: {', '.join(FRONTENDS)}")
    return FRONTENDS[kind]


def framework_of(source: Any) -> str:
    """The framework of ``source``'s graph (``tf``, ``torch``, a plugin's name), from its front end."""
    fw = frontend_of(source).framework
    return fw(source) if callable(fw) else (fw or source.kind)


def environments_of(source: Any) -> frozenset:
    """The environments ``source``'s graph can be measured in (``sim``, ``real``, ``grappler``)."""
    envs = frontend_of(source).environments
    return frozenset(envs(source) if callable(envs) else envs)


def environment_problem(source: Any, env: str) -> str | None:
    """Why ``source``'s graph cannot be measured in ``env`` (one line naming the field and the value),
    or ``None`` when it can."""
    envs = environments_of(source)
    if env in envs:
        return None
    what = {"grappler": "TensorFlow's cost model of a GraphDef", "real": "real execution",
            "sim": "the simulator"}.get(env, repr(env))
    return (f"env: {env!r} is {what}; a {framework_of(source)} graph ({source.kind} source) is measured in "
            f"{' or '.join(repr(e) for e in sorted(envs))}")


def export_formats(source: Any) -> Mapping[str, Callable[..., Exported]]:
    """Export format -> writer of ``source``'s front end (``json`` is every front end's, not listed)."""
    ex = frontend_of(source).exports
    return ex(source) if callable(ex) else ex


def op_class(op_type: str) -> str:
    """``dense``, ``conv`` or ``other``: the compute class of ``op_type`` in the front end whose importer
    writes it (the first registered front end that classes it; ``other`` when none does)."""
    for fe in FRONTENDS.values():
        if fe.op_classes is not None:
            cls = fe.op_classes(op_type)
            if cls != "other":
                return cls
    return "other"


def is_user_graph(source: Any) -> bool:
    """True for a user's graph (any source but a benchmark)."""
    return frontend_of(source).user if getattr(source, "kind", None) in FRONTENDS else source.kind != "benchmark"


def tensorflow_source(source: Any) -> bool:
    """True when ``source`` gives a TensorFlow ``GraphDef`` (its front end's framework is ``tf``)."""
    return framework_of(source) == "tf"


def _bench(src):
    from compgraph.models import BENCHMARKS

    return BENCHMARKS.get(getattr(src, "model", ""))


def _export_tf(source, placed: Mapping[str, str], header: str, cache_dir=None) -> Exported:
    """A TensorFlow source's ``GraphDef`` with each node's device set from ``placed`` (op -> device)."""
    from compgraph.tf_import import placed_graph_def

    prepared = prepare_source(source, None, None, 0, None if is_user_graph(source) else cache_dir)
    if prepared.graph_def is None:
        raise ValueError(f"{prepared.name}: no TensorFlow GraphDef")
    gd = placed_graph_def(prepared.graph_def, placed)
    return Exported(gd.SerializeToString(deterministic=True), prepared.graph, tuple(prepared.fetches))


def _export_torch(source, placed: Mapping[str, str], header: str, cache_dir=None) -> Exported:
    """A PyTorch source's captured step as placed ``torch.fx`` code, transfers inserted."""
    from compgraph.torch_step import module_source, placed_module

    step = capture_source(source)
    module, inputs = placed_module(step, dict(placed))
    return Exported(module_source(module, inputs, header).encode(), step.graph)


SIZES_HELP = ("small (demo) | paper (2017 sizes) | a table's settings: rnnlm post (Post Table 1), nmt post2/post4/post8 "
          "(Post Table 1), inception_v3 eagle (EAGLE Table IV), large (rnnlm, nmt), gpt2 and 6.7b (gpt); `placement "
          "models` lists each")
_TF: dict[str, Any] = {"environments": ALL_ENVIRONMENTS, "framework": "tf", "exports": {"tf": _export_tf}}
_TORCH: dict[str, Any] = {"environments": frozenset({"sim", "real"}), "framework": "torch", "exports": {"torch": _export_torch}}


def _probe(kind: str, framework: Callable[[], object]) -> Callable[[Any], None]:
    """A probe of a user's ``MODULE:FUNCTION`` of ``kind`` in a child process, ``framework()`` imported here
    meanwhile (what the in-process call needs next)."""
    def probe(src) -> None:
        from compgraph.user_spec import probe_user_function

        probe_user_function(src.spec, kind, meanwhile=framework)
    return probe


def _import_tensorflow() -> object:
    from compgraph.tf_env import import_tensorflow

    return import_tensorflow()


def _bench_kind(key: str):
    def of(src):
        bench = _bench(src)
        return (_TORCH if bench is not None and bench.framework == "torch" else _TF)[key]
    return of


def _tf_op_class(op_type: str) -> str:
    from compgraph.tf_import import tf_op_class

    return tf_op_class(op_type)


def _torch_op_class(op_type: str) -> str:
    from compgraph.torch_step import torch_op_class

    return torch_op_class(op_type)


register(Frontend("benchmark", BenchmarkSource, _benchmark, flags=(
    SourceFlag("model", "model", "benchmark name (see `placement models`), or give a user's graph (default rnnlm)"),
    SourceFlag("size", "size", SIZES_HELP + " (default small)"),
), environments=_bench_kind("environments"), framework=_bench_kind("framework"), exports=_bench_kind("exports"),
    user=False))
register(user_frontend("graph_def", GraphDefSource, _load_graph_def, lambda s: (s.path, Path(s.path).stem), flags=(
    SourceFlag("graph_def", "path", "a user's training-step GraphDef (.pb or .pbtxt) instead of --model"),
    SourceFlag("fetches", "fetches", "with --graph-def: an op name one step runs (repeatable; default: the graph's "
                                     "sinks without initializers)", repeated=True,
               note="fetches is for GraphDef files; a Keras model's or SavedModel signature's step fetches its outputs "
                    "and updates"),
), op_classes=_tf_op_class, **_TF))
register(user_frontend("saved_model", SavedModelSource, _load_saved_model, lambda s: (
    f"saved model {s.path!r}", Path(s.path).resolve().name + (f":{s.signature}" if s.signature else "")), flags=(
    SourceFlag("saved_model", "path", "a SavedModel folder whose --signature is a tf.function training step, "
                                      "instead of --model"),
    SourceFlag("signature", "signature", "the SavedModel signature of the training step (default: its only one)"),
), **_TF))
register(user_frontend("keras", KerasSource, _load_keras, lambda s: (f"keras {s.spec!r}", s.spec), flags=(
    SourceFlag("keras", "spec", "MODULE:FUNCTION (imported from the current folder) or path/to/file.py:FUNCTION "
                                "returning a Keras 3 model or (keras model, input specs), instead of --model"),
), probe=_probe("keras", _import_tensorflow), **_TF))


def _prepare_torch(src: TorchSource, grouper=None, num_groups=None, seed=0, cache_dir=None, int_bounds=None):
    """A user's PyTorch step: captured ([`compgraph.torch_step.load_torch_step`][compgraph.torch_step.load_torch_step]) and grouped
    (default ``heuristic``); no GraphDef: real execution captures it again from ``src``
    ([`cluster.torch_real`][cluster.torch_real]), with ``int_bounds`` over its integer inputs (``input/K``)."""
    from compgraph.grouping import check_grouper, default_num_groups, group
    from compgraph.torch_step import load_torch_step

    grouper = grouper or "heuristic"
    if num_groups is None:
        num_groups = default_num_groups(grouper)
    check_grouper(grouper, None, num_groups, src.spec)
    step = load_torch_step(src.spec, src.optimizer)
    grouping = group(step.graph, grouper, None, num_groups, seed)
    return PreparedGraph(None, "user", None, step.graph, grouping, None, (), dict(step.info),
                         int_bounds=dict(int_bounds or {}), torch_source=src)


register(Frontend("torch", TorchSource, _prepare_torch, flags=(
    SourceFlag("torch", "spec", "MODULE:FUNCTION (imported from the current folder) or path/to/file.py:FUNCTION "
                                "returning (module, example_args), where module(*example_args) is the scalar training "
                                "loss; the step (forward, backward, --torch-optimizer's update) is captured at the ATen "
                                "level on meta tensors, instead of --model"),
    SourceFlag("torch_optimizer", "optimizer", "with --torch: sgd | adam, the update the captured step ends with "
                                               "(torch.optim's defaults; default adam)"),
), op_classes=_torch_op_class, probe=_probe("torch", lambda: __import__("torch")), **_TORCH))


def source_flags() -> list[SourceFlag]:
    """Every registered front end's flags, the default front end's first, in registration order."""
    order = [FRONTENDS[DEFAULT_KIND], *(fe for k, fe in FRONTENDS.items() if k != DEFAULT_KIND)]
    return [f for fe in order for f in fe.flags]


def chosen_frontend(values: Mapping[str, Any]) -> Frontend:
    """The front end that flat flag values (flag name -> value, ``None`` when not given) name: the one whose
    first flag is given, else the default one ([`DEFAULT_KIND`][compgraph.frontends.DEFAULT_KIND]).

    Raises:
        ValueError: several front ends' first flags (``give one of graph_def, ... not several``); a
            flag given without its front end's first one (its ``note``, else ``NAME is for FIRST``).
    """
    chosen = [fe for k, fe in FRONTENDS.items() if k != DEFAULT_KIND and fe.flags
              and values.get(fe.flags[0].name) is not None]
    if len(chosen) > 1:
        names = [fe.flags[0].name for fe in FRONTENDS.values() if fe.kind != DEFAULT_KIND and fe.flags]
        raise ValueError(f"give one of {', '.join(names[:-1])} and {names[-1]}, not several "
                         f"({', '.join(fe.flags[0].name for fe in chosen)})")
    frontend = chosen[0] if chosen else FRONTENDS[DEFAULT_KIND]
    for fe in FRONTENDS.values():
        if fe is frontend or fe.kind == DEFAULT_KIND:
            continue
        for f in fe.flags[1:]:
            if values.get(f.name) is not None:
                raise ValueError(f.note or f"{f.name} is for {fe.flags[0].name}")
    return frontend


def source_from_flags(values: Mapping[str, Any]) -> Any:
    """The source named by flat flag values (flag name -> value, ``None`` when not given): of the front
    end [`chosen_frontend`][compgraph.frontends.chosen_frontend] picks; a field left unset keeps the source model's default.

    Raises:
        ValueError: those of [`chosen_frontend`][compgraph.frontends.chosen_frontend]; the source model's
            (a pydantic ``ValidationError``, located by the model's field).
    """
    frontend = chosen_frontend(values)
    fields = {f.field: values[f.name] for f in frontend.flags if values.get(f.name) is not None}
    return frontend.source(**fields)


def graph_source(model: str | None = None, size: str = "small", graph_def: str | None = None,
                 keras: str | None = None, saved_model: str | None = None, signature: str | None = None,
                 fetches: list[str] | None = None, torch: str | None = None,
                 torch_optimizer: str | None = None, **others: Any) -> Any:
    """[`source_from_flags`][compgraph.frontends.source_from_flags] of the flat options of the CLI and the flows (a
    plugin's flags in ``others``): a user's graph when one of ``graph_def``, ``saved_model``,
    ``keras``, ``torch``... is given, else the benchmark ``model`` at ``size``.

    Raises:
        ValueError: those of [`source_from_flags`][compgraph.frontends.source_from_flags].
    """
    return source_from_flags({"model": model, "size": size, "graph_def": graph_def, "keras": keras,
                              "saved_model": saved_model, "signature": signature, "fetches": fetches,
                              "torch": torch, "torch_optimizer": torch_optimizer, **others})


PLUGINS_ENV = "PLACEMENT_FRONTENDS"
"""Environment variable: comma-separated modules imported with this one, each registering front ends."""

ENTRY_POINTS = "device_placement.frontends"
"""Entry-point group of installed front-end plugins (each entry point a module to import)."""


def load_plugins() -> list[str]:
    """Import the front-end plugin modules of ``$PLACEMENT_FRONTENDS`` and of the entry-point group
    ``device_placement.frontends``; each module calls [`register`][compgraph.frontends.register]. Called once when
    this module is imported, before [`GraphSource`][compgraph.frontends.GraphSource] is built. Returns the modules.

    Raises:
        ImportError: a module named there does not import (the message names it and where it was named).
    """
    from importlib.metadata import entry_points

    named = [(m.strip(), f"${PLUGINS_ENV}") for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    named += [(ep.value.split(":")[0], f"entry point {ep.name!r}") for ep in entry_points(group=ENTRY_POINTS)]
    for module, where in named:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImportError(f"front-end plugin {module!r} (from {where}): {exc}") from exc
    return [m for m, _ in named]


_KEPT: dict[str, PreparedGraph] = {}
"""The user's graph last prepared with ``keep=True``, by `_keep_key`: handed to the next
[`prepare_source`][compgraph.frontends.prepare_source] of the same source and settings in this process, once."""


def _keep_key(source: GraphSource, grouper: str | None, num_groups: int | None, seed: int,
              int_bounds: dict[str, int] | None) -> str:
    """The source and settings of a prepared user's graph, with the size and modification time
    (ns) of its file or of every file under its folder, so that a file changed in between is
    prepared anew."""
    import json

    stamps = []
    path = getattr(source, "path", None)
    if path is not None:
        root = Path(path)
        for f in sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]:
            try:
                st = f.stat()
                stamps.append([str(f), st.st_size, st.st_mtime_ns])
            except OSError:
                stamps.append([str(f), None, None])
    return json.dumps([source.model_dump(mode="json"), grouper, num_groups, seed, int_bounds, stamps], sort_keys=True)


def prepare_source(source: GraphSource, grouper: str | None = None, num_groups: int | None = None, seed: int = 0,
                   cache_dir: str | Path | None = None, int_bounds: dict[str, int] | None = None,
                   keep: bool = False) -> PreparedGraph:
    """Import and group the training step of ``source`` with its front end ([`FRONTENDS`][compgraph.frontends.FRONTENDS]).

    Args:
        grouper: a grouper of [`compgraph.grouping.GROUPERS`][compgraph.grouping.GROUPERS] (``None``: ``2017`` for a
            benchmark, ``heuristic`` for a user's graph).
        num_groups: target groups of ``metis``/``fluid`` (``None``: 256).
        seed: seed of the automatic groupers.
        cache_dir: the preprocessed-graph cache of benchmarks ([`compgraph.cache`][compgraph.cache]).
        int_bounds: a user's graph: integer input name -> exclusive bound of its ids.
        keep: a user's graph: keep the result for the next call with the same source and
            settings in this process, which returns it (once) instead of importing it again.
            The CLI checks a user's graph before its flow starts; the flow's own call then takes
            the checked graph (a 6.7B PyTorch step's capture is about 25 s). Benchmarks have
            their disk cache (``cache_dir``) instead.
    Raises:
        ValueError: an unknown kind, model, size or grouper, a bad ``num_groups``,
            ``int_bounds`` for a benchmark.
        compgraph.user_graph.UserGraphError: a user's file or model is unusable (the message names it).
    """
    if source.kind not in FRONTENDS:
        raise ValueError(f"source kind {source.kind!r}: no front end; valid: {', '.join(FRONTENDS)}")
    key = _keep_key(source, grouper, num_groups, seed, int_bounds) if is_user_graph(source) and (keep or _KEPT) else None
    if key is not None and key in _KEPT:
        return _KEPT.pop(key)
    prepared = FRONTENDS[source.kind].prepare(source, grouper, num_groups, seed, cache_dir, int_bounds)
    if prepared.framework is None:
        prepared.framework = framework_of(source)
    if keep and key is not None:
        _KEPT.clear()
        _KEPT[key] = prepared
    return prepared


def prepare_user_graph(
    graph_def_path: str | Path | None = None,
    keras: str | None = None,
    grouper: str = "heuristic",
    num_groups: int | None = None,
    fetches: list[str] | None = None,
    seed: int = 0,
    saved_model: str | Path | None = None,
    signature: str | None = None,
    int_bounds: dict[str, int] | None = None,
) -> PreparedGraph:
    """Import and group a user's training step: a ``GraphDef`` file, a SavedModel signature or a
    Keras model ([`graph_source`][compgraph.frontends.graph_source] then [`prepare_source`][compgraph.frontends.prepare_source]).

    Returns:
        A [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph] with ``benchmark=None``, ``size="user"``,
        ``config=None``, ``import_info`` set; the graph is named after the file's stem, the
        SavedModel folder's name (``:signature`` added when given) or the Keras spec.
    Raises:
        ValueError: not exactly one of ``graph_def_path``, ``saved_model`` and ``keras``; those
            of [`graph_source`][compgraph.frontends.graph_source] and [`prepare_source`][compgraph.frontends.prepare_source].
        compgraph.user_graph.UserGraphError: the file or model is unusable, the importer rejects
            the graph (the message names the file), or an ``int_bounds`` entry names no integer
            input or is not an integer >= 1.
    """
    if sum(x is not None for x in (graph_def_path, keras, saved_model)) != 1:
        raise ValueError("give exactly one of graph_def_path (a .pb/.pbtxt GraphDef), saved_model (a folder) and keras ('module:function')")
    source = graph_source(graph_def=None if graph_def_path is None else str(graph_def_path), keras=keras,
                          saved_model=None if saved_model is None else str(saved_model), signature=signature,
                          fetches=fetches)
    return prepare_source(source, grouper, num_groups, seed, None, int_bounds)


def capture_source(source):
    """The captured step ([`compgraph.torch_step.CapturedStep`][compgraph.torch_step.CapturedStep]) of a PyTorch graph source: a ``torch``
    source ([`compgraph.torch_step.load_torch_step`][compgraph.torch_step.load_torch_step]) or a PyTorch benchmark
    ([`compgraph.torch_models.capture_benchmark`][compgraph.torch_models.capture_benchmark]). It lives with the sources it reads, so the
    capture ([`compgraph.torch_step`][compgraph.torch_step]) needs no benchmark table (no import circle).

    Raises:
        ValueError: a TensorFlow source.
    """
    from compgraph.torch_step import load_torch_step

    if source.kind == "torch":
        return load_torch_step(source.spec, source.optimizer)
    from compgraph.models import BENCHMARKS
    from compgraph.torch_models import capture_benchmark

    bench = BENCHMARKS.get(getattr(source, "model", ""))
    if source.kind != "benchmark" or bench is None or bench.framework != "torch":
        raise ValueError(f"source {source.kind!r}: not a PyTorch step")
    return capture_benchmark(bench.name, bench.sizes[source.size])


load_plugins()


class _ChoiceOfKinds:
    """``Annotated`` marker: the JSON schema of a union of kinds lists them under ``anyOf`` (beside
    the ``discriminator``) rather than ``oneOf``, which means the same here (each kind has its own
    ``kind``): Prefect's form shows an ``anyOf`` as one button per kind, by its title, with the
    chosen kind's fields below; its v1 UI shows a ``oneOf`` as a raw JSON box."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = dict(handler(core_schema))
        if "oneOf" in schema:
            schema["anyOf"] = schema.pop("oneOf")
        return schema


if TYPE_CHECKING:
    GraphSource = Annotated[Union[BenchmarkSource, GraphDefSource, SavedModelSource, KerasSource, TorchSource],
                            Field(discriminator="kind"), _ChoiceOfKinds()]
else:
    GraphSource = Annotated[Union[tuple(fe.source for fe in FRONTENDS.values())], Field(discriminator="kind"),
                            _ChoiceOfKinds()]
"""Any graph source of a registered front end, told apart by ``kind`` (in a form: a choice of
kinds, each with its fields); built after the plugins ([`load_plugins`][compgraph.frontends.load_plugins]) registered theirs."""
