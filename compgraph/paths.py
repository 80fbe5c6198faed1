"""Names that become paths, and paths that must stay inside the folder the user gave.

A cluster spec's ``name``, a user graph's name or a Prefect form field ends up in file names
(run folders, placement logs, checkpoints, cost tables). [`slug`][compgraph.paths.slug] reduces any such name to
``[A-Za-z0-9._+=-]`` with no leading dot, so it is one path component and never ``..``;
[`inside`][compgraph.paths.inside] checks that a path about to be written resolves (symlinks followed) inside its
root, and refuses it in one line otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")
MAX_SLUG = 80
"""Characters kept of a name (file systems allow 255 bytes per component; a run folder joins five names)."""


class UnsafePath(ValueError):
    """A path the project was about to write resolves outside the folder the user gave (one line)."""


def slug(name: object, max_len: int = MAX_SLUG) -> str:
    """``name`` as one safe path component: every run of characters outside ``[A-Za-z0-9._+=-]``
    (``/``, spaces, NUL, non-ASCII...) becomes ``_``, runs of dots become one ``_``-separated dot,
    leading dots, dashes and underscores go, and it is cut to ``max_len`` characters.

    ``"../../../tmp/x/ESCAPED"`` -> ``"tmp_x_ESCAPED"``; ``"k80x2"`` -> ``"k80x2"``; ``""`` -> ``"unnamed"``.
    """
    text = _UNSAFE.sub("_", str(name))
    text = re.sub(r"\.{2,}", ".", text)
    text = text.lstrip("._-")[:max_len].rstrip(".")
    return text or "unnamed"


def inside(root: str | Path, path: str | Path) -> Path:
    """``path`` resolved, after checking that it lies inside ``root`` (both resolved, symlinks followed).

    Raises:
        UnsafePath: ``path`` resolves outside ``root`` (the message names both).
    """
    root_r, path_r = Path(root).resolve(), Path(path).resolve()
    if path_r != root_r and root_r not in path_r.parents:
        raise UnsafePath(f"refusing to write {path}: it resolves to {path_r}, outside {root_r}")
    return path_r


def named_path(root: str | Path, folder: str, *parts: object, suffix: str = "") -> Path:
    """``<root>/<folder>/<part1>-<part2>-...<suffix>``, every part through [`slug`][compgraph.paths.slug], checked
    [`inside`][compgraph.paths.inside] ``root`` (the path is returned unresolved, as callers print it).

    Raises:
        UnsafePath: the path resolves outside ``root`` (e.g. ``folder`` or a symlink leads out).
    """
    stem = "-".join(slug(p) for p in parts)
    path = Path(root) / folder / f"{stem}{suffix}"
    inside(root, path)
    return path
