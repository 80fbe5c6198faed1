"""``placement baselines``: the table, the --json shape and bad input (issue 10)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner


@pytest.mark.parametrize(
    "args, needle",
    [
        (["baselines", "--methods", "metis,magic"], "unknown method 'magic'; valid: single_cpu"),
        (["baselines", "--cluster", "nope"], "unknown cluster 'nope'"),
        (["baselines", "--time-limit", "0"], "--time-limit must be positive, got 0"),
        (["baselines", "--model", "nope"], "unknown model 'nope'"),
    ],
)
def test_baselines_bad_values_exit_2_with_one_line(args, needle):
    from cli.main import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_baselines_json_has_every_method_with_ratios(tmp_path):
    from cli.main import app

    out = tmp_path / "b.json"
    r = CliRunner().invoke(app, ["baselines", "--model", "rnnlm", "--size", "small", "--cluster", "k80x2",
                                 "--methods", "single_gpu,metis,m_etf", "--out-dir", str(tmp_path), "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "lower bound: " in r.output and "x optimum" in r.output and "m_etf" in r.output
    result = json.loads(out.read_text())
    assert list(result["methods"]) == ["single_gpu", "metis", "m_etf"]
    lb = result["lower_bound_s"]
    assert lb > 0 and result["optimum_s"] is None and result["optimum_proven"] is None
    for name, row in result["methods"].items():
        assert row["oom"] is False and row["step_time_s"] >= lb, name
        assert row["x_lower_bound"] == pytest.approx(row["step_time_s"] / lb)
        assert row["seconds"] >= 0 and row["devices_used"] >= 1
    assert result["methods"]["metis"]["devices_used"] == 2
    assert result["methods"]["m_etf"]["op_level"] is True
    assert len(result["methods"]["m_etf"]["placement"]) == result["ops"]
