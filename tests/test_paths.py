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
