"""What every ``placement`` command shares: the typer app (one-line usage errors), the process
environment and the helpers for bad input (one line, exit 2), JSON output and graph preparation.
[`cli.main`][cli.main] and the command modules ([`cli.measure`][cli.measure], [`cli.compare`][cli.compare]...) import from here,
so no command module imports another."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import typer

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Prefect's run logs (our stage and search lines) go to the API at INFO, so the flow run's Logs tab has
# them; its console handler shows warnings only, so the terminal has our lines, not Prefect's.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # not its "Creating initial MLflow database tables" lines
os.environ.setdefault("PLACEMENT_STAGE_LINES", "1")  # tracking.progress: a line per stage on stderr, TTY or not
os.environ.setdefault("PLACEMENT_START_TIME", repr(__import__("time").time()))  # stage lines count from here
from cli.runtime import configure_environment, one_line_errors_group  # noqa: E402

configure_environment()

_ROLE = re.compile(r":(?:py:)?[a-z]+:`([~!]?)([^`<]*?)\s*(?:<([^`>]+)>)?`")  # a Sphinx role; title <target> too
_XREF = re.compile(r"\[`?([^`\]]+)`?\]\[[^\]]*\]")  # a mkdocstrings cross-reference: [`title`][target]


def plain_help(text: str | None) -> str | None:
    """A docstring as ``--help`` shows it: no markup. A Sphinx role gives its target (its last part when
    the target starts with a tilde, its title when it has one), a mkdocstrings cross-reference its title,
    a double-backquoted literal its text; the lines of each paragraph are joined into one."""
    if not text:
        return text

    def role(m: re.Match) -> str:
        tilde, body, target = m.group(1), m.group(2).strip(), m.group(3)
        if target:  # title <target>
            return body
        return body.rsplit(".", 1)[-1] if tilde == "~" else body

    text = _XREF.sub(r"\1", _ROLE.sub(role, text)).replace("``", "")
    return "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()))


def plain_command_help(command) -> None:
    """Make a click command's help, short help and options' help plain text ([`plain_help`][cli.common.plain_help])."""
    for obj in (command, *getattr(command, "params", ())):
        for attr in ("help", "short_help"):
            if isinstance(getattr(obj, attr, None), str):
                setattr(obj, attr, plain_help(getattr(obj, attr)))


def _plain_help_group(base: type) -> type:
    """``base`` (a typer group class) whose commands' help texts are plain ([`plain_command_help`][cli.common.plain_command_help]):
    the docstrings keep their cross-references for the docs site, ``--help`` shows none of their markup."""

    class PlainHelpGroup(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            plain_command_help(self)
            for command in self.commands.values():
                plain_command_help(command)

    return PlainHelpGroup


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, help="Device placement experiments.",
                  cls=_plain_help_group(one_line_errors_group()))


def _fail(message: str) -> None:
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)  # one line, whatever the message
    raise typer.Exit(2)


def check_json_path(path: str | None) -> str | None:
    """Typer callback of every ``--json``: ``-`` or a file path whose folder exists (created here) and is
    writable, checked before any work. Raises ``typer.BadParameter`` (one line, exit 2) otherwise."""
    return check_output_path(path, stdout=True)


def check_output_path(path: str | None, stdout: bool = False) -> str | None:
    """A file path the command will write, checked before any work: not a folder, its folder created
    here, writable; ``-`` passes where ``stdout``. Raises ``typer.BadParameter`` (one line, exit 2) otherwise."""
    if path is None or (stdout and path == "-"):
        return path
    p = Path(path)
    if p.is_dir():
        raise typer.BadParameter(f"{path!r} is a folder; give a file path" + (" or '-'" if stdout else ""))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create the folder of {path!r} ({exc.strerror or type(exc).__name__})") from None
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise typer.BadParameter(f"{path!r} is not writable")
    return path


def out_dir_or_home(value: str | None) -> str:
    """Typer callback of every ``--out-dir``: the folder given, else the user-level home
    ([`tracking.placement_home`][tracking.placement_home]: ``$PLACEMENT_HOME`` or the platform's user data folder),
    so that runs from any folder share one MLflow store."""
    from tracking import placement_home

    return value if value else str(placement_home())


def _write_json(obj: dict | list, path: str) -> None:
    text = json.dumps(obj, indent=2, default=float)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(path).write_text(text + "\n")


def _check_model(model: str, size: str) -> None:
    from compgraph.models import BENCHMARKS

    if model not in BENCHMARKS:
        _fail(f"unknown model {model!r}; valid: {', '.join(BENCHMARKS)}")
    if size not in BENCHMARKS[model].sizes:
        _fail(f"unknown size {size!r} for {model}; valid: {', '.join(BENCHMARKS[model].sizes)}")


def _prepare_graph(source, grouper: str | None, num_groups: int | None, cache_dir: str | None, seed: int,
                   int_bounds: dict[str, int] | None = None, env: str | None = None, keep: bool = False):
    """The prepared graph of ``source`` (a [`compgraph.frontends.GraphSource`][compgraph.frontends.GraphSource], e.g. a config's):
    bad input -> one line, exit 2. ``int_bounds`` (``--int-bound``) is for a user's graph; with
    ``env="real"`` every integer input of a user's graph must have a bound (given or in the graph).
    ``cache_dir``: the benchmarks' graph cache. ``keep``: the check before a flow; the flow's own
    preparation with the same settings takes this graph instead of importing it again
    ([`compgraph.frontends.prepare_source`][compgraph.frontends.prepare_source])."""
    from compgraph.frontends import frontend_of, is_user_graph, prepare_source

    user = is_user_graph(source)
    if source.kind == "benchmark":
        _check_model(source.model, source.size)
    try:  # UserGraphError is a ValueError
        probe = frontend_of(source).probe
        if probe is not None:  # a user's function that ends its process would end this one silently
            probe(source)
        prepared = prepare_source(source, grouper, num_groups, seed, None if user else cache_dir, int_bounds, keep=keep)
    except ValueError as exc:
        _fail(str(exc))
    if env == "real" and prepared.int_bound_problem():
        _fail(prepared.int_bound_problem())
    return prepared


def _set_max_graph_mb(value: int | None) -> int | None:
    """``--max-graph-mb`` callback: checked (>= 1) and set for this process as
    [`compgraph.user_graph.MAX_GRAPH_ENV`][compgraph.user_graph.MAX_GRAPH_ENV] (bytes), so the flow's own load sees it too."""
    if value is None:
        return value
    if value < 1:
        _fail(f"--max-graph-mb must be at least 1, got {value}")
    from compgraph.user_graph import MAX_GRAPH_ENV

    os.environ[MAX_GRAPH_ENV] = str(int(value) * 1_000_000)
    return value


def max_graph_mb_option():
    """The ``--max-graph-mb`` option of every command that takes a user's graph."""
    return typer.Option(None, "--max-graph-mb", callback=_set_max_graph_mb,
                        help="largest user graph read, in MB: a GraphDef file or a SavedModel folder (default 1000)")


def parse_int_bounds(values: list[str] | None, user_graph: bool | None = None) -> dict[str, int] | None:
    """``--int-bound NAME=N`` options -> ``{NAME: N}`` (``None`` when none given); a malformed one,
    or ``N`` not an integer >= 1, is one line, exit 2; so is one without a user's graph when
    ``user_graph`` is ``False`` (``None``: the caller's config checks that)."""
    if not values:
        return None
    if user_graph is False:
        _fail("--int-bound is for a user's graph (--graph-def, --saved-model, --keras); a benchmark's integer inputs "
              "are bounded by its own tables")
    out = {}
    for v in values:
        name, sep, n = v.partition("=")
        if not sep or not name.strip():
            _fail(f"--int-bound {v!r}: expected NAME=N (an integer input of the graph and the exclusive bound of its ids)")
        try:
            bound = int(n)
        except ValueError:
            bound = 0
        if bound < 1:
            _fail(f"--int-bound {v!r}: N must be an integer >= 1, got {n!r}")
        out[name.strip()] = bound
    return out


def _flag_of(flags: dict[str, str]) -> dict[str, str]:
    """Config path -> the (first) flag that sets it, from ``flags`` (flag -> config path)."""
    words: dict[str, str] = {}
    for flag, path in flags.items():
        words.setdefault(path, flag)
    return words


def flag_words(message: str, flags: dict[str, str]) -> str:
    """``message`` in the command line's words: each dotted config path of ``flags`` (flag -> path,
    e.g. ``"--workers": "ray.workers"``) replaced by its flag, ``learners.M`` by ``--learner-option M``,
    and a top-level field that opens the message (``methods: ...``) by its flag."""
    import re

    words = _flag_of(flags)
    for path in sorted((p for p in words if "." in p), key=len, reverse=True):  # ray.workers, not workers alone
        message = re.sub(rf"(?<![\w.-]){re.escape(path)}(?!\w)", words[path], message)
    message = re.sub(r"(?<![\w.-])learners\.(\w+)", r"--learner-option \1", message)
    head, sep, rest = message.partition(": ")
    return f"{words[head]}: {rest}" if sep and head in words else message


def config_error(exc, flags: dict[str, str]) -> str:
    """The first error of a pydantic ``ValidationError`` of a config built from flags, as one line
    naming the flag (``flags``: flag -> config path) and the value."""
    err = exc.errors()[0]
    loc = [str(x) for x in err["loc"]]
    if loc[:1] == ["source"] and len(loc) > 2:  # a discriminated union's member: source.<kind>.<field>
        loc = ["source", *loc[2:]]
    path = ".".join(loc)
    words = _flag_of(flags)
    if path in words:
        flag = words[path]
    elif loc[:1] == ["learners"] and len(loc) >= 2:
        flag = f"--learner-option {'.'.join(loc[1:])}" if len(loc) > 2 else f"--learner-option {loc[1]}"
    else:
        flag = next((words[".".join(loc[:k])] for k in range(len(loc), 0, -1) if ".".join(loc[:k]) in words), path)
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "value_error" or not loc:
        message = flag_words(str(err["msg"]).removeprefix("Value error, "), flags)
        return message if not loc or message.startswith(("--", flag)) else f"{flag}: {message}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return f"{flag} must be {'at least' if kind == 'greater_than_equal' else 'more than'} {bound:g}, got {value!r}"
    if kind == "literal_error":
        return f"unknown {flag} value {value!r}; valid: {ctx.get('expected')}"
    if kind == "extra_forbidden":
        valid = ""
        if loc[:1] == ["learners"]:  # a learner, or one of its options
            from tasks.config import LEARNER_OPTIONS

            if len(loc) == 2:
                return f"{flag}: unknown learner {loc[1]!r}; valid: {', '.join(LEARNER_OPTIONS)}"
            if loc[1] in LEARNER_OPTIONS:
                valid = f"; valid: {', '.join(LEARNER_OPTIONS[loc[1]].model_fields)}"
        return f"{flag}: unknown setting {loc[-1]!r}{valid}"
    return f"{flag}: {str(err['msg']).lower()} (got {value!r})"


def build_config(settings: dict, flags: dict[str, str]):
    """[`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig] of ``settings`` (nested dicts, the config's shape); an
    invalid one is one line naming the flag ([`config_error`][cli.common.config_error]), exit 2."""
    from pydantic import ValidationError

    from tasks.config import ExperimentConfig

    try:
        return ExperimentConfig.model_validate(settings)
    except ValidationError as exc:
        _fail(config_error(exc, flags))


def _choose_methods(methods: str | None, valid: list[str], default: list[str], spec, user_graph: bool) -> list[str]:
    """The methods of ``--methods`` (comma-separated; ``None``: ``default``), checked: each in
    ``valid``, not empty, and each baseline able to place this graph on ``spec``
    ([`baselines.Baseline.problem`][baselines.Baseline.problem]: a GPU, a CPU, a benchmark's layer rules). A bad one is
    one line, exit 2."""
    from baselines import BASELINES

    chosen = list(default) if methods is None else [m.strip() for m in methods.split(",") if m.strip()]
    for m in chosen:
        if m not in valid:
            _fail(f"unknown method {m!r}; valid: {', '.join(valid)}")
    if not chosen:
        _fail(f"--methods is empty; valid: {', '.join(valid)}")
    for m in chosen:
        problem = BASELINES[m].problem(spec, user_graph) if m in BASELINES else None
        if problem:
            _fail(f"{problem}; drop it from --methods")
    return chosen
