"""A user's graph named on the command line: ``module:function`` or ``path/to/file.py:function``, resolved
to the function (imported as ``python script.py`` would, the current folder first on ``sys.path``), and
probed in a subprocess first so that a function that ends its process cannot take the command with it.
[`compgraph.user_graph`][compgraph.user_graph] builds the step from what the function returns.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


class UserGraphError(ValueError):
    """A user's graph file or Keras model cannot be used; the message names the source and the problem."""


@contextmanager
def _cwd_on_path():
    """The current folder first on ``sys.path`` while importing, as ``python script.py``
    resolves the script's own modules (an installed ``placement`` command otherwise has
    only its own folder there)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        importlib.invalidate_caches()
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


SPEC_PATTERN = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)")
"""A ``module:function`` spec (``--keras``, ``--torch``)."""
FILE_SPEC_PATTERN = re.compile(r"(.+\.py):([A-Za-z_]\w*)")
"""A ``path/to/file.py:function`` spec (``--keras``, ``--torch``): a Python file, relative to the current folder."""
SPEC_FORMS = "'module:function' or 'path/to/file.py:function', e.g. 'mypackage.models:build_model' or 'my_cnn.py:cnn'"
"""The accepted spec forms, for error messages."""


def parse_spec(spec: str | None) -> tuple[str, str, str] | None:
    """``(kind, target, function)`` of a ``--keras``/``--torch`` spec: kind ``file`` (``target`` a
    ``.py`` path, [`FILE_SPEC_PATTERN`][compgraph.user_spec.FILE_SPEC_PATTERN], tried first: ``my_cnn.py:cnn`` is a file, not module
    ``my_cnn.py``) or ``module`` ([`SPEC_PATTERN`][compgraph.user_spec.SPEC_PATTERN]); ``None`` if it is neither."""
    for kind, pattern in (("file", FILE_SPEC_PATTERN), ("module", SPEC_PATTERN)):
        m = pattern.fullmatch(spec or "")
        if m is not None:
            return kind, m.group(1), m.group(2)
    return None


def _import_user_file(file: str, spec: str, what: str):
    """The module of the Python file ``file`` (relative to the current folder), executed once per
    process under a name of its own (``_placement_user_<stem>_<hash of its path>``, so two files
    of one name stay apart) with its folder first on ``sys.path`` (as ``python path/to/file.py``
    resolves the file's own modules).

    Raises:
        UserGraphError: no such file; the file raised (or called ``sys.exit``) while executing.
    """
    import hashlib
    import importlib.util

    path = Path(file).expanduser()
    if not path.is_file():
        where = "" if path.is_absolute() else f" in {os.getcwd()}"
        raise UserGraphError(f"{what} {spec!r}: no file {file!r}{where}")
    path = path.resolve()
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_placement_user_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise UserGraphError(f"{what} {spec!r}: {file!r} is not a Python file Python can load")
    module = importlib.util.module_from_spec(loader_spec)
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # the user's file raised while executing
        sys.modules.pop(name, None)
        raise UserGraphError(f"{what} {spec!r}: running {file!r} failed: {type(e).__name__}: {e}") from e
    except SystemExit as e:
        sys.modules.pop(name, None)
        raise UserGraphError(f"{what} {spec!r}: running {file!r} failed: it called sys.exit({e.code!r})") from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def resolve_user_function(spec: str, what: str):
    """``(function, its name)`` named by ``spec``: ``"module:function"``, the module imported with
    the current folder first on ``sys.path`` (as Python resolves a script's modules), or
    ``"path/to/file.py:function"``, the file (relative to the current folder) run as a module of
    its own (`_import_user_file`).

    Args:
        what: the front end's word in error messages (``keras``, ``torch``).
    Raises:
        UserGraphError: the spec is neither form ([`SPEC_FORMS`][compgraph.user_spec.SPEC_FORMS]); the file does not exist; the
            module cannot be imported (or calls ``sys.exit``); it has no such function.
    """
    parsed = parse_spec(spec)
    if parsed is None:
        raise UserGraphError(f"{what} spec {spec!r}: expected {SPEC_FORMS}")
    kind, module_name, func_name = parsed
    if kind == "file":
        module = _import_user_file(module_name, spec, what)
        fn = getattr(module, func_name, None)
        if not callable(fn):
            raise UserGraphError(f"{what} {spec!r}: file {module_name!r} has no function {func_name!r}")
        return fn, func_name
    try:
        with _cwd_on_path():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise UserGraphError(f"{what} {spec!r}: no module {module_name!r} in {os.getcwd()} or on sys.path ({e})") from e
    except Exception as e:  # the user's module raised while importing
        raise UserGraphError(f"{what} {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    except SystemExit as e:  # sys.exit() in the user's module: a failed import, not our exit
        raise UserGraphError(f"{what} {spec!r}: importing {module_name!r} failed: it called sys.exit({e.code!r})") from None
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise UserGraphError(f"{what} {spec!r}: module {module_name!r} has no function {func_name!r}")
    return fn, func_name


_PROBE = r"""
import importlib, os, sys
handshake = os.dup(1)  # ours: the user's code may close or redirect its stdout
cwd = os.getcwd()
if cwd not in sys.path and "" not in sys.path:
    sys.path.insert(0, cwd)
try:
    if sys.argv[1].endswith(".py"):  # a file (compgraph.user_graph._import_user_file)
        import importlib.util
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
        spec = importlib.util.spec_from_file_location("_placement_user_probe", sys.argv[1])
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(sys.argv[1])
    fn = getattr(module, sys.argv[2])
    os.write(handshake, b"imported\n")
    fn()
except BaseException:
    pass  # an exception or sys.exit: the process lives on; the in-process call reports it in one line
os.write(handshake, b"returned\n")
os._exit(0)
"""


def probe_user_function(spec: str, what: str, meanwhile: Callable[[], object] | None = None) -> None:
    """Import the module of ``spec`` (``"module:function"``) and call the function in a child
    process (the current folder first on ``sys.path``, as [`resolve_user_function`][compgraph.user_spec.resolve_user_function]), nothing
    else, to learn whether it ends its process (``os._exit``, a signal to itself) instead of
    returning or raising: in-process, that would end the command silently (exit 0, no run).
    ``sys.exit`` and exceptions are left to the in-process call, which reports them.

    Its cost is a Python start, the module's import and one call of the function (a model built
    on the ``meta`` device costs nothing of its size). ``meanwhile()`` runs here while the child
    does (the CLI imports the framework the in-process call needs next): ``graph-stats`` of a small
    PyTorch step took 2.9-3.1 s with the probe and without it (three runs each, this 2-core machine);
    0.85 s more with the probe run before the import instead. A spec that is not
    ``module:function`` is not probed.

    Raises:
        UserGraphError: the child ended before returning (names the exit code or the signal).
    """
    import signal
    import subprocess

    parsed = parse_spec(spec)
    if parsed is None:
        if meanwhile is not None:
            meanwhile()
        return
    _, module_name, func_name = parsed
    env = dict(os.environ)
    if what == "keras":  # as the in-process call sees it, after compgraph.tf_env.import_tensorflow
        env = {"TF_USE_LEGACY_KERAS": "1", "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    try:
        child = subprocess.Popen([sys.executable, "-c", _PROBE, module_name, func_name], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    except OSError:
        child = None  # no child to probe with: the in-process call goes ahead as before
    try:
        if meanwhile is not None:
            meanwhile()
        if child is None:
            return
        out, _ = child.communicate()
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
    said = out.split(b"\n")
    if child.returncode == 0 and b"returned" in said:
        return
    rc = child.returncode
    try:
        how = f"exit code {rc}" if rc >= 0 else f"killed by {signal.Signals(-rc).name}"
    except ValueError:
        how = f"killed by signal {-rc}"
    if b"imported" not in said:
        raise UserGraphError(f"{what} {spec!r}: importing {module_name!r} ended its process ({how}) before returning")
    raise UserGraphError(f"{what} {spec!r}: the function {func_name}() ended its process ({how}) before returning")


