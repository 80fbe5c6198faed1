"""The options several commands share, declared once (name, flag and help), as ``Annotated``
types; each command gives its own default in its signature, e.g. ``cluster: Cluster = "k80x2"``.
The graph's flags are every front end's ([`compgraph.frontends.SourceFlag`][compgraph.frontends.SourceFlag]), added to a command by
[`graph_flags`][cli.options.graph_flags]."""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Annotated, Optional

import typer

from cli.common import _fail, check_json_path, config_error, out_dir_or_home
from tracking import placement_home

from compgraph.frontends import SIZES_HELP

# the graph: a benchmark's flags, for the commands that take benchmarks only (every front end's: graph_flags)
Model = Annotated[str, typer.Option(help="benchmark name (see `placement models`)")]
Size = Annotated[str, typer.Option(help=SIZES_HELP)]
IntBound = Annotated[list[str], typer.Option("--int-bound", help="NAME=N: a user graph's integer input NAME takes ids in [0, N) "
                                                                 "when run for real (repeatable; default: the size of the "
                                                                 "table it indexes)")]
# its groups
Grouper = Annotated[str, typer.Option(help="heuristic | 2017 | metis | fluid (default: 2017 for benchmarks, heuristic for "
                                           "users' graphs)")]
NumGroups = Annotated[int, typer.Option(help="target number of groups of the automatic groupers, metis and fluid (default 256)")]
CacheDir = Annotated[str, typer.Option(help="preprocessed-graph cache, read if it matches, else written (default: "
                                            "<out-dir>/graph-cache)")]
# the machine and the measurement
Cluster = Annotated[str, typer.Option(help="preset name (see `placement clusters`) or a YAML cluster spec")]
Env = Annotated[str, typer.Option(help="measurement environment: sim (simulator) | real (TensorFlow on this machine's "
                                       "devices) | grappler (TensorFlow's cost model)")]
# the learners
LearnerOption = Annotated[list[str], typer.Option("--learner-option", help="METHOD.FIELD=VALUE: a setting of one learner's config "
                                                                           "(repeatable; VALUE as JSON, else a string), e.g. "
                                                                           "rl.hidden_size=64")]
Resume = Annotated[bool, typer.Option("--resume", help="continue an interrupted run with the same settings from its placement "
                                                       "logs and checkpoints (nothing measured twice)")]
# where results go
HOME_HELP = f"default: {placement_home()}, i.e. $PLACEMENT_HOME, else the user data folder"
"""The default of every ``--out-dir`` in words ([`cli.common.out_dir_or_home`][cli.common.out_dir_or_home])."""
OutDir = Annotated[str, typer.Option(callback=out_dir_or_home,
                                     help="folder of the run folders, the MLflow store (without --tracking-uri), the graph "
                                          f"cache and the placement logs ({HOME_HELP})")]
TrackingUri = Annotated[str, typer.Option(help="MLflow tracking URI (default: SQLite file in --out-dir)")]
Json = Annotated[str, typer.Option("--json", callback=check_json_path, help="write the result object to PATH ('-': stdout)")]


def source_flag_paths() -> dict[str, str]:
    """Every front end's flag -> the config path it sets (``--graph-def``: ``source.path``)."""
    from compgraph.frontends import source_flags

    return {f.flag: f"source.{f.field}" for f in source_flags()}


def cli_source(values: dict, optional: bool = False):
    """[`compgraph.frontends.source_from_flags`][compgraph.frontends.source_from_flags] of the graph flags' values (name -> value);
    ``None`` when ``optional`` and none is given. A bad combination is one line in flags (``give one
    of --graph-def, --saved-model, --keras and --torch, not several``), exit 2."""
    import re

    from pydantic import ValidationError

    from compgraph.frontends import DEFAULT_KIND, FRONTENDS, chosen_frontend, source_flags, source_from_flags

    if optional and all(v is None for v in values.values()):
        return None
    flags = {f.name: f.flag for f in source_flags()}
    try:
        source = source_from_flags(values)
    except ValidationError as exc:  # a flag's bad value: the configs' one line (unknown --torch-optimizer value ...)
        _fail(config_error(exc, {f.flag: f.field for f in chosen_frontend(values).flags}))
    except ValueError as exc:  # a bad combination, in flag names
        _fail(re.sub(r"(?<![\w-])(" + "|".join(sorted(flags, key=len, reverse=True)) + r")\b",
                     lambda m: flags[m.group(1)], str(exc)))
    default = [f.flag for f in FRONTENDS[DEFAULT_KIND].flags if values.get(f.name) is not None]
    if default and source.kind != DEFAULT_KIND:
        _fail(f"give {' '.join(default)} (a benchmark) or {FRONTENDS[source.kind].flags[0].flag}, not both")
    first = FRONTENDS[DEFAULT_KIND].flags[0]
    if optional and source.kind == DEFAULT_KIND and values.get(first.name) is None:  # --size alone: no model here
        _fail(f"{' '.join(default)} is for {first.flag}: give {first.flag} (a benchmark) or a user's graph")
    return source


def _flag_help(flag, optional: bool) -> str:
    """A graph flag's ``--help``; a command whose graph is ``optional`` has no default model, so ``--model``
    says ``(no default here)`` there instead of ``(default rnnlm)``."""
    if optional and flag.name == "model":
        return flag.help.replace("(default rnnlm)", "(no default here)")
    return flag.help


def graph_flags(optional: bool = False):
    """Decorator of a command taking a graph: its parameter ``source`` becomes every registered front
    end's flags ([`compgraph.frontends.source_flags`][compgraph.frontends.source_flags]: ``--model``, ``--size``, ``--graph-def``,
    ``--fetches``, ``--saved-model``, ``--signature``, ``--keras``, ``--torch``, ``--torch-optimizer``, a
    plugin's), and the command is called with the source they name ([`cli_source`][cli.options.cli_source]; with
    ``optional``, ``None`` when none is given). The flags are generated here once, from the registry,
    for every command: a new front end's flags reach them all."""

    def wrap(func):
        from compgraph.frontends import source_flags

        flags = source_flags()
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
        where = [p.name for p in params].index("source")
        generated = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            Optional[list[str] if f.repeated else str], typer.Option(f.flag, help=_flag_help(f, optional))])
            for f in flags]
        params[where:where + 1] = generated

        @functools.wraps(func)
        def command(**kwargs):
            values = {f.name: kwargs.pop(f.name) or None for f in flags}  # an empty repeated flag: not given
            return func(source=cli_source(values, optional), **kwargs)

        del command.__wrapped__  # typer reads the signature below, not func's
        command.__signature__ = signature.replace(parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                                                              for p in params])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return wrap
