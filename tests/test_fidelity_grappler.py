"""``placement fidelity --against grappler`` end to end: the small RNNLM on k80x2, our simulator
against TensorFlow's cost model (grappler's VirtualCluster), Prefect under the test harness and a
real SQLite MLflow store in ``tmp_path``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def prefect_harness():
    import cli.main  # noqa: F401  (sets the environment defaults before Prefect reads its settings)
    import flows.measure  # noqa: F401
    from conftest import prefect_harness as harness

    with harness():
        yield


def invoke(args):
    import cli.measure  # noqa: F401  (registers the commands)
    from cli.main import app

    return CliRunner().invoke(app, args)


@pytest.mark.slow
def test_fidelity_against_grappler_prints_tau_and_mape(prefect_harness, tmp_path):
    out = tmp_path / "runs"
    r = invoke(["fidelity", "--model", "rnnlm", "--cluster", "k80x2", "--against", "grappler", "--random", "2",
                "--budget", "1", "--out-dir", str(out), "--json", str(tmp_path / "f.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "f.json").read_text())
    assert res["against"] == "grappler" and res["cost_table"] is None
    kinds = [row["kind"] for row in res["rows"]]
    assert kinds == ["random"] * 2 + ["random-gpu"] * 2 + ["baseline"] * 6 + ["learner"] * 2
    for row in res["rows"]:
        assert row["sim_s"] > 0 and row["real_s"] > 0 and row["sim_calibrated_s"] is None
        assert row["gpu_only"] == (row["kind"] == "random-gpu" or row["name"] in ("single_gpu", "expert", "mincut_group", "metis_group")
                                   or (row["kind"] == "learner" and row["gpu_only"]))
    assert res["n"] == len(res["rows"]) and res["n_gpu_only"] >= 4
    assert -1 <= res["kendall_tau"] <= 1 and res["mape"] >= 0
    assert -1 <= res["kendall_tau_gpu_only"] <= 1 and res["mape_gpu_only"] >= 0
    text = " ".join(r.output.split())
    assert f"roofline simulator against grappler: Kendall tau {res['kendall_tau']:+.3f}, MAPE {100 * res['mape']:.1f}%" in text
    assert f"GPU-only placements ({res['n_gpu_only']}): Kendall tau {res['kendall_tau_gpu_only']:+.3f}" in text


def test_fidelity_against_unknown_reference_fails_with_one_line():
    """Refused before any flow runs: no Prefect server is needed."""
    r = invoke(["fidelity", "--model", "rnnlm", "--cluster", "k80x2", "--against", "oracle"])
    assert r.exit_code == 2
    assert "unknown --against 'oracle'; valid: real, grappler" in r.output
