"""Names that become paths stay inside the folder the user gave (compgraph.paths)."""

from __future__ import annotations

import pytest

from compgraph.paths import UnsafePath, inside, named_path, slug


@pytest.mark.parametrize("name, expected", [
    ("k80x2", "k80x2"),
    ("../../../../tmp/x/ESCAPED", "tmp_x_ESCAPED"),
    ("..", "unnamed"),
    ("", "unnamed"),
    ("a b\x00c", "a_b_c"),
    ("/etc/passwd", "etc_passwd"),
    (".hidden", "hidden"),
])
def test_slug_is_one_safe_component(name, expected):
    assert slug(name) == expected
    assert "/" not in slug(name) and slug(name) not in (".", "..")


def test_a_spec_named_to_escape_gets_its_run_folder_and_logs_inside_out_dir(tmp_path):
    from tasks.search import run_paths
    from tracking.live import run_folder

    out = tmp_path / "out"
    folder = run_folder(out, "20260101-000000", "rnnlm", "small", "../../../../tmp/x/ESCAPED", 0)
    assert folder.resolve().parent == (out / "runs").resolve()
    assert folder.name == "20260101-000000-rnnlm-small-tmp_x_ESCAPED-seed0"
    log, ckpt = run_paths(out, "../m", "small", "../../c", "2017", "rl", 0, 10)
    assert log.parent == out / "placement-logs" and ckpt.parent == out / "checkpoints"
    assert list(tmp_path.iterdir()) == [out]


def test_a_symlink_leading_out_is_refused_in_one_line(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir(), elsewhere.mkdir()
    (out / "runs").symlink_to(elsewhere)
    with pytest.raises(UnsafePath, match="outside") as exc:
        named_path(out, "runs", "x")
    assert "\n" not in str(exc.value)
    assert inside(out, out / "a" / "b") == (out / "a" / "b").resolve()


def test_placement_home_is_the_env_variable_else_the_platform_user_data_folder(monkeypatch, tmp_path):
    from platformdirs import user_data_path

    from tracking import placement_home

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    assert placement_home() == tmp_path / "home"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLACEMENT_HOME", "rel/home")  # made absolute: a run from another folder finds the same store
    assert placement_home() == tmp_path / "rel" / "home"
    for unset in ("", "  "):
        monkeypatch.setenv("PLACEMENT_HOME", unset)
        assert placement_home() == user_data_path("device-placement", appauthor=False)
    monkeypatch.delenv("PLACEMENT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # Linux: the platform's convention, via platformdirs
    assert placement_home() == tmp_path / "xdg" / "device-placement"
    assert not (tmp_path / "xdg").exists()  # naming it creates nothing


def test_the_suite_cannot_write_into_the_real_user_data_folder():
    """conftest points PLACEMENT_HOME (and XDG_DATA_HOME) into a temporary folder before any project
    module is imported: every default out-dir (the CLI's, the experiment config's, the flows') is in it."""
    import inspect
    import os
    import tempfile
    from pathlib import Path

    import conftest
    from flows.compare import compare_learners
    from flows.reproduce import placement_reproduce
    from flows.measure import DEFAULT_OUT_DIR
    from tasks.config import ExperimentConfig
    from tracking import placement_home

    home = Path(conftest.SUITE_HOME)
    assert home.is_relative_to(tempfile.gettempdir()) and home.name.startswith("placement-home-")
    assert os.environ["PLACEMENT_HOME"] == str(home) and placement_home() == home
    assert Path(os.environ["XDG_DATA_HOME"]).is_relative_to(home)
    assert ExperimentConfig().tracking.out_dir == str(home) == DEFAULT_OUT_DIR
    for flow in (compare_learners, placement_reproduce):
        assert inspect.signature(flow.fn).parameters["out_dir"].default == str(home)


def test_every_command_without_out_dir_uses_the_home_from_any_folder(tmp_path, monkeypatch):
    """`placement experiment` started in two folders without --out-dir gets one out-dir, the home (its
    MLflow store, run folders and graph cache); --out-dir still overrides it."""
    from typer.testing import CliRunner

    import cli.main

    seen: list[dict] = []

    class Stop(Exception):
        pass

    def run_flow(flow_fn, fail, **kwargs):
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(cli.main, "run_flow", run_flow)
    home = tmp_path / "home"
    monkeypatch.setenv("PLACEMENT_HOME", str(home))
    for folder in ("model-folder", "elsewhere"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        r = CliRunner().invoke(cli.main.app, ["experiment", "--methods", "expert", "--budget", "1"])
        assert isinstance(r.exception, Stop), r.output
    r = CliRunner().invoke(cli.main.app, ["experiment", "--methods", "expert", "--out-dir", "mine"])
    assert isinstance(r.exception, Stop), r.output
    assert [s["tracking"].out_dir for s in seen] == [str(home), str(home), "mine"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "home", "model-folder"]  # nothing else written
    assert list((tmp_path / "model-folder").iterdir()) == []
