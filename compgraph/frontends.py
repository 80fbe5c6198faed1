"""Graph sources and their front ends: one registry, one dispatch.

A *graph source* says where a training step comes from, as a small pydantic model with a
``kind``: a registered benchmark ([`BenchmarkSource`][compgraph.frontends.BenchmarkSource]), a TensorFlow ``GraphDef`` file
([`GraphDefSource`][compgraph.frontends.GraphDefSource]), a SavedModel signature ([`SavedModelSource`][compgraph.frontends.SavedModelSource]) or a Keras
model built by the user's function ([`KerasSource`][compgraph.frontends.KerasSource]). [`GraphSource`][compgraph.frontends.GraphSource] is their
discriminated union (on ``kind``), so a config or a JSON form holds any of them.

A *front end* ([`Frontend`][compgraph.frontends.Frontend], in [`FRONTENDS`][compgraph.frontends.FRONTENDS] by kind) turns a source of its kind
into a [`compgraph.prepare.PreparedGraph`][compgraph.prepare.PreparedGraph]; [`prepare_source`][compgraph.frontends.prepare_source] is the one place that
dispatches on the kind. The CLI and the flows build a source from their flat options with
[`graph_source`][compgraph.frontends.graph_source].

**Adding a front end** (e.g. PyTorch's ``torch.export``): a source model with a new ``kind``
(added to [`GraphSource`][compgraph.frontends.GraphSource]), a loader ``load(source) -> compgraph.user_graph.UserStep``
(the step's TensorFlow ``GraphDef``, fetches and import notes), a ``describe(source) ->
(text naming the source in errors, graph name)``, the cost rules of its new op types in
[`compgraph.costs`][compgraph.costs], and [`register`][compgraph.frontends.register].
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

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


GraphSource = Annotated[Union[BenchmarkSource, GraphDefSource, SavedModelSource, KerasSource, TorchSource],
                        Field(discriminator="kind"), _ChoiceOfKinds()]
"""Any graph source, told apart by ``kind`` (in a form: a choice of kinds, each with its fields)."""


@dataclass(frozen=True)
class Frontend:
    """How sources of one kind become a prepared graph.

    Attributes:
        kind: the sources' ``kind``.
        source: their pydantic model.
        prepare: ``prepare(source, grouper, num_groups, seed, cache_dir, int_bounds) -> PreparedGraph``
            (``grouper=None``: the front end's default).
    """

    kind: str
    source: type[BaseModel]
    prepare: Callable[..., PreparedGraph]


FRONTENDS: dict[str, Frontend] = {}
"""Source kind -> [`Frontend`][compgraph.frontends.Frontend]."""


def register(frontend: Frontend) -> Frontend:
    """Add ``frontend`` to [`FRONTENDS`][compgraph.frontends.FRONTENDS].

    Raises:
        ValueError: another front end already has its kind.
    """
    if frontend.kind in FRONTENDS and FRONTENDS[frontend.kind] is not frontend:
        raise ValueError(f"front end kind {frontend.kind!r}: already registered")
    FRONTENDS[frontend.kind] = frontend
    return frontend


def user_frontend(kind: str, source: type[BaseModel], load: Callable[[Any], Any],
                  describe: Callable[[Any], tuple[str, str]]) -> Frontend:
    """A front end of a user's graph: ``load(source)`` gives the step
    ([`compgraph.user_graph.UserStep`][compgraph.user_graph.UserStep]), ``describe(source)`` the text naming it in errors
    and the graph's name; the step is imported and grouped by
    [`compgraph.prepare.prepare_user_step`][compgraph.prepare.prepare_user_step] (default grouper ``heuristic``)."""

    def run(src, grouper=None, num_groups=None, seed=0, cache_dir=None, int_bounds=None) -> PreparedGraph:
        text, name = describe(src)
        return prepare_user_step(lambda: load(src), text, name, grouper or "heuristic", num_groups, seed, int_bounds)

    return Frontend(kind, source, run)


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


register(Frontend("benchmark", BenchmarkSource, _benchmark))
register(user_frontend("graph_def", GraphDefSource, _load_graph_def, lambda s: (s.path, Path(s.path).stem)))
register(user_frontend("saved_model", SavedModelSource, _load_saved_model, lambda s: (
    f"saved model {s.path!r}", Path(s.path).resolve().name + (f":{s.signature}" if s.signature else ""))))
register(user_frontend("keras", KerasSource, _load_keras, lambda s: (f"keras {s.spec!r}", s.spec)))


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


register(Frontend("torch", TorchSource, _prepare_torch))


def graph_source(model: str | None = None, size: str = "small", graph_def: str | None = None,
                 keras: str | None = None, saved_model: str | None = None, signature: str | None = None,
                 fetches: list[str] | None = None, torch: str | None = None,
                 torch_optimizer: str = "adam") -> GraphSource:
    """The source named by the flat options of the CLI and the flows: a user's graph when one of
    ``graph_def``, ``saved_model``, ``keras`` and ``torch`` is given, else the benchmark ``model``
    at ``size``.

    Raises:
        ValueError: several of ``graph_def``, ``saved_model``, ``keras`` and ``torch``;
            ``signature`` without ``saved_model``; ``fetches`` without ``graph_def``.
    """
    given = [k for k, v in (("graph_def", graph_def), ("saved_model", saved_model), ("keras", keras),
                            ("torch", torch)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"give one of graph_def, saved_model, keras and torch, not several ({', '.join(given)})")
    if signature is not None and saved_model is None:
        raise ValueError("signature is for saved_model")
    if fetches is not None and graph_def is None:
        raise ValueError("fetches is for GraphDef files; a Keras model's or SavedModel signature's step fetches its "
                         "outputs and updates")
    if graph_def is not None:
        return GraphDefSource(path=str(graph_def), fetches=fetches)
    if saved_model is not None:
        return SavedModelSource(path=str(saved_model), signature=signature)
    if keras is not None:
        return KerasSource(spec=keras)
    if torch is not None:
        return TorchSource(spec=torch, optimizer=torch_optimizer)  # type: ignore[arg-type]
    return BenchmarkSource(model=model or "rnnlm", size=size)


def tensorflow_source(source: GraphSource) -> bool:
    """True when ``source`` gives a TensorFlow ``GraphDef`` (real execution and grappler need one);
    False for a PyTorch step, a user's (``torch``) or a benchmark's (``framework="torch"``)."""
    if source.kind == "torch":
        return False
    if source.kind == "benchmark":
        from compgraph.models import BENCHMARKS

        bench = BENCHMARKS.get(source.model)
        return bench is None or bench.framework == "tf"
    return True


def is_user_graph(source: GraphSource) -> bool:
    """True for a user's graph (any source but a benchmark)."""
    return source.kind != "benchmark"


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
