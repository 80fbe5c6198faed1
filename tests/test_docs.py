"""The docs: the site builds with ``mkdocs build --strict`` (a broken link or cross-reference fails
here), the README stays short and names exactly the two set-up commands, and ``--help`` shows no
docstring markup."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKUP = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|obj|exc|const):|``|\]\[")


def test_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to a page under docs/"


def test_readme_names_exactly_the_two_commands():
    text = README.read_text(encoding="utf-8")
    scripts = set(re.findall(r"bash (scripts/[\w.-]+\.sh)", text))
    assert scripts == {"scripts/demo.sh", "scripts/test.sh"}, scripts
    for other in ("pip install", "uv pip", "uv venv", "scripts/setup.sh", "python -m venv"):
        assert other not in text, f"README.md names {other!r}: the two commands do the set-up"


def test_readme_and_mkdocs_nav_name_pages_that_exist():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).is_file(), target
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$|^\s*-\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = {a or b for a, b in nav}
    assert pages and all((ROOT / "docs" / p).is_file() for p in pages), pages
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == pages, f"pages not in mkdocs.yml's nav: {on_disk - pages}; missing: {pages - on_disk}"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    """The whole site, API reference included (about 20 s on a 2-core machine)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (scripts/setup.sh installs it from requirements.lock)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([mkdocs, "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    problems = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0, "\n".join(problems) or proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "placer" / "index.html").is_file()
    page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert ":class:" not in page and "autorefs-internal" in page  # roles render as links, not as text


def test_experiment_help_has_no_markup():
    """``placement experiment --help`` as a user runs it: the docstring's roles and literals are plain."""
    proc = subprocess.run([sys.executable, "-m", "cli.main", "experiment", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "ExperimentConfig" in proc.stdout
    assert not MARKUP.search(proc.stdout), MARKUP.search(proc.stdout)


def test_no_command_help_has_markup():
    from typer.main import get_command

    from cli.main import app

    group = get_command(app)
    assert len(group.commands) >= 10
    for name, command in group.commands.items():
        for text in [command.help, command.short_help, *(getattr(p, "help", None) for p in command.params)]:
            assert not (text and MARKUP.search(text)), (name, text)


def test_plain_help_turns_roles_and_cross_references_into_text():
    from cli.common import plain_help

    text = ("The flags build one :class:`tasks.config.ExperimentConfig` (:data:`~cli.main.EXPERIMENT_FLAGS`,\n"
            ":func:`the fit <cluster.fitting.fit>`), [`Learner`][placer.learner.Learner] and ``--budget``.\n\nNext.")
    assert plain_help(text) == ("The flags build one tasks.config.ExperimentConfig (EXPERIMENT_FLAGS, the fit), "
                                "Learner and --budget.\n\nNext.")


def test_the_xref_conversion_resolves_as_sphinx_would():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import convert_xrefs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    index = convert_xrefs.Index()
    convert = convert_xrefs.convert
    assert convert(":class:`tasks.config.ExperimentConfig`", "cli.main", index) == \
        "[`tasks.config.ExperimentConfig`][tasks.config.ExperimentConfig]"
    assert convert(":data:`EXPERIMENT_FLAGS`", "cli.main.experiment", index) == "[`EXPERIMENT_FLAGS`][cli.main.EXPERIMENT_FLAGS]"
    assert convert(":data:`~placer.LEARNERS`", "tasks.search", index) == "[`LEARNERS`][placer.learner.LEARNERS]"
    assert convert(":func:`_fail`", "cli.main", index) == "`_fail`"  # private: not on the site, plain code
    assert convert(":class:`torch.nn.Module`", "cli.main", index) == "`torch.nn.Module`"  # another library's


def test_docstrings_use_the_sites_cross_references_not_sphinx_roles():
    """Every docstring names other objects as the site renders them (``[`title`][target]``); a Sphinx
    role (``:class:`x.Y```) is refused here: ``python scripts/convert_xrefs.py --write`` converts it."""
    import subprocess

    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "convert_xrefs.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "would rewrite 0 roles" in r.stdout
