"""``benchmarks/learners.py`` (issue 36): its graphs parse (today's PyTorch steps included), and its JSON
has every field the results table of docs/results.md shows, from a real (tiny) run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import learners as bench  # noqa: E402

#: the columns of the table in docs/results.md and the README (graph, method, seeds, budget, median best,
#: x expert, x best baseline, x best known, placements to within 5%, CPU s, placements / CPU-s)
TABLE_FIELDS = {"graph", "method", "seeds", "budget", "median_best_s", "x_expert", "x_best_baseline", "x_best_known",
                "median_placements_to_within_5pct", "median_cpu_s", "median_placements_per_cpu_s"}


def test_the_default_graphs_are_the_paper_graphs_and_todays():
    graphs = [bench.parse_graph(g) for g in bench.DEFAULT_GRAPHS.split(",")]
    assert ("nmt", "paper", "k80x4") in graphs and ("rnnlm", "paper", "k80x2") in graphs
    assert ("gpt", "6.7b", "h100x8") in graphs and ("gpt", "gpt2", "a100x4-pcie") in graphs


def test_a_graph_without_a_cluster_is_refused_naming_it():
    with pytest.raises(SystemExit, match="'nmt'.*MODEL\\[/SIZE\\]:CLUSTER"):
        bench.parse_graph("nmt")


def test_the_json_has_the_fields_of_the_table(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = bench.main(["--graphs", "rnnlm/small:k80x2", "--methods", "ce,local_search", "--budget", "24", "--seeds", "0",
                     "--variant", "ce_prior=ce:init=single_gpu,smoothing=0.7,elites_kept=6",
                     "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert printed["summary"] == saved["summary"]
    rows = {r["method"]: r for r in saved["summary"]}
    assert set(rows) == {"ce", "local_search", "ce_prior"}
    for row in rows.values():
        assert TABLE_FIELDS <= set(row)
        assert row["graph"] == "rnnlm/small:k80x2" and row["seeds"] == 1 and row["budget"] == 24
        assert row["median_best_s"] > 0 and row["x_best_known"] >= 1.0 - 1e-12
    assert [r["options"] for r in saved["runs"] if r["method"] == "ce_prior"] == [
        {"init": "single_gpu", "smoothing": 0.7, "elites_kept": 6}]
    assert saved["graphs"]["rnnlm/small:k80x2"]["best_baseline"] in saved["graphs"]["rnnlm/small:k80x2"]["baselines"]
