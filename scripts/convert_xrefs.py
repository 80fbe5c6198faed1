"""Sphinx cross-reference roles in docstrings -> the cross-references the docs site renders.

The docstrings name other objects with Sphinx roles (``:class:`tasks.config.ExperimentConfig```,
``:func:`op_count_factor```, ``:data:`~placer.LEARNERS```). The docs site renders docstrings as
Markdown with mkdocstrings-python, whose cross-reference is ``[`title`][identifier]``. This script
rewrites each role:

- to ``[`title`][canonical.path]`` when the target is an object the site renders (a public module,
  class, function or attribute of the project's packages, found as Sphinx would: relative to the
  docstring's object, its class, its module and package, then as an absolute path; an imported name
  is followed to where it is defined);
- to plain code, ``title``, when it is not (a private helper, another library's object, a name
  that no longer exists), so that ``mkdocs build --strict`` never meets a broken reference.

The title is what Sphinx shows: the target as written, its last part with ``~``, or the explicit
``title <target>``.

Usage (from the repository root, in .venv):

    python scripts/convert_xrefs.py --check        # count what would change; change nothing (exit 1 if any)
    python scripts/convert_xrefs.py --diff         # also print the unified diff
    python scripts/convert_xrefs.py --write        # rewrite the files in place

It is also a griffe extension (mkdocs.yml: ``scripts/convert_xrefs.py:SphinxRoles``): the same rewrite
applied to each docstring as the site loads it, so the site links them before the sources change.
``placement --help`` strips both forms (``cli.common.plain_help``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections import Counter
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["baselines", "cli", "cluster", "compgraph", "flows", "placer", "tasks", "tracking"]
ROLES = ("class", "func", "meth", "data", "attr", "mod", "obj", "exc", "const")
ROLE = re.compile(r":(?:py:)?(" + "|".join(ROLES) + r"):`([^`\n]+)`")
# what the site leaves out (mkdocs.yml's mkdocstrings filters): every name with a leading underscore
PRIVATE = re.compile(r"^_")
RENDERED_KINDS = (griffe.Kind.MODULE, griffe.Kind.CLASS)
# names that exist only at run time, as a module's __getattr__ (PEP 562) makes them -> where they are defined
RUN_TIME_NAMES = {"placer.LEARNERS": "placer.learner.LEARNERS"}


class Index:
    """Every object of the project's packages by path (imported names followed to their definition),
    and which of them the docs site renders."""

    def __init__(self, root: Path = ROOT, packages: list[str] = PACKAGES):
        loader = griffe.GriffeLoader(search_paths=[str(root)])
        self.modules = [loader.load(name) for name in packages]
        self.canonical: dict[str, str] = {}
        self.rendered: set[str] = set()
        for module in self.modules:
            self.canonical[module.path] = module.path
            self.rendered.add(module.path)
            self._walk(module, visible=True)
        for name, target in RUN_TIME_NAMES.items():
            self.canonical.setdefault(name, target)

    def _walk(self, obj, visible: bool) -> None:
        for name, member in obj.members.items():
            if member.is_alias:
                try:
                    target = member.final_target
                except Exception:  # another library's object, or a name that does not resolve
                    continue
                self.canonical.setdefault(member.path, target.path)
                continue
            self.canonical[member.path] = member.path
            shown = visible and obj.kind in RENDERED_KINDS and not PRIVATE.match(name)
            if shown:
                self.rendered.add(member.path)
            if member.kind in RENDERED_KINDS:
                self._walk(member, shown)

    def resolve(self, target: str, scope: str) -> str | None:
        """The rendered object's path that ``target`` names from ``scope`` (a dotted path), or None."""
        target = target.strip().rstrip("()")
        if target.startswith("."):  # Sphinx's "search": any object whose path ends so
            ends = [p for p in self.canonical if p.endswith(target)]
            found = {self.canonical[p] for p in ends}
            return found.pop() if len(found) == 1 and found & self.rendered else None
        parts = scope.split(".") if scope else []
        for i in range(len(parts), -1, -1):
            path = ".".join([*parts[:i], target])
            if path in self.canonical:
                canonical = self.canonical[path]
                return canonical if canonical in self.rendered else None
        return None


def convert(text: str, scope: str, index: Index, counts: Counter | None = None) -> str:
    """``text`` with every Sphinx role rewritten (the module docstring says how)."""

    def one(m: re.Match) -> str:
        role, body = m.group(1), m.group(2).strip()
        explicit = re.fullmatch(r"(.*?)\s*<([^<>]+)>", body)
        if explicit:
            title, target = explicit.group(1), explicit.group(2)
        else:
            target = body.lstrip("~!")
            title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
        path = None if body.startswith("!") else index.resolve(target, scope)
        if counts is not None:
            counts[(role, "link" if path else "code")] += 1
        return f"[`{title}`][{path}]" if path else f"`{title}`"

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Griffe extension: rewrite each loaded docstring's Sphinx roles (:func:`convert`) in place."""

    def __init__(self) -> None:
        super().__init__()
        self._index: Index | None = None

    def on_package(self, *, pkg, **kwargs) -> None:
        if pkg.path not in PACKAGES:
            return
        if self._index is None:
            self._index = Index()
        stack = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = convert(obj.docstring.value, obj.path, self._index)
            stack.extend(m for m in obj.members.values() if not m.is_alias)


def _scopes(module) -> list[tuple[int, int, str]]:
    """(first line, last line, path) of every object defined in ``module``'s file."""
    out = [(1, 10**9, module.path)]
    stack = list(module.members.values())
    while stack:
        obj = stack.pop()
        if obj.is_alias or obj.is_module:
            continue
        if obj.lineno is not None:
            out.append((obj.lineno, obj.endlineno or obj.lineno, obj.path))
        stack.extend(obj.members.values())
    return out


def _modules(index: Index):
    stack = list(index.modules)
    while stack:
        module = stack.pop()
        yield module
        stack.extend(m for m in module.members.values() if not m.is_alias and m.is_module)


def convert_sources(index: Index, write: bool, diff: bool) -> tuple[Counter, dict[str, int]]:
    """Rewrite (or, without ``write``, only count) the roles in every file of the packages. A role's
    scope is the innermost object whose lines hold it (a docstring, an attribute's comment)."""
    counts: Counter = Counter()
    per_file: dict[str, int] = {}
    this_file = Path(__file__).resolve()
    for module in _modules(index):
        path = Path(module.filepath)
        if path.resolve() == this_file:
            continue
        scopes = _scopes(module)
        old = path.read_text(encoding="utf-8")
        lines = old.splitlines(keepends=True)
        before = sum(counts.values())
        for i, line in enumerate(lines, start=1):
            if ROLE.search(line):
                scope = min((s for s in scopes if s[0] <= i <= s[1]), key=lambda s: (s[1] - s[0], -s[0]))[2]
                lines[i - 1] = convert(line, scope, index, counts)
        new = "".join(lines)
        if new != old:
            rel = str(path.relative_to(ROOT))
            per_file[rel] = sum(counts.values()) - before
            if diff:
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), lines, rel, rel))
            if write:
                path.write_text(new, encoding="utf-8")
    return counts, per_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="count what would change and change nothing (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite the files in place")
    parser.add_argument("--diff", action="store_true", help="print the unified diff of every file that would change")
    args = parser.parse_args(argv)
    counts, per_file = convert_sources(Index(), write=args.write, diff=args.diff)
    links = sum(n for (_, kind), n in counts.items() if kind == "link")
    code = sum(n for (_, kind), n in counts.items() if kind == "code")
    print(f"{'rewrote' if args.write else 'would rewrite'} {links + code} roles in {len(per_file)} files: "
          f"{links} to cross-references, {code} to plain code (targets the site does not render)")
    for role in ROLES:
        if counts[(role, "link")] or counts[(role, "code")]:
            print(f"  :{role}: {counts[(role, 'link')]} links, {counts[(role, 'code')]} plain")
    for rel, n in sorted(per_file.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {rel}: {n}")
    return 1 if (per_file and not args.write) else 0


if __name__ == "__main__":
    sys.exit(main())
