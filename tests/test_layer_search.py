"""``benchmarks/layer_search.py``: every assignment of the layer scopes to the GPUs is measured, so its best
is at most the expert's (the expert keeps each layer whole) and equals that placement measured again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("layer_search", ROOT / "benchmarks" / "layer_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # prepares rnnlm small: about 9 s here
def test_layer_search_measures_every_assignment_and_its_best_is_that_placement(capsys, tmp_path):
    from baselines import BASELINES, BaselineContext
    from cluster.factory import make_environment
    from cluster.spec import load_cluster
    from compgraph.prepare import prepare

    module = _module()
    best = tmp_path / "best.json"
    assert module.main(["--model", "rnnlm", "--size", "small", "--cluster", "k80x2", "--depth", "2",
                        "--cache-dir", str(tmp_path), "--output", str(best)]) == 0
    out = json.loads(capsys.readouterr().out)
    scopes = [s["scope"] for s in out["leaf_scopes"]]
    assert {"rnnlm/layer_0", "rnnlm/layer_1", "rnnlm/softmax"} <= set(scopes) and len(set(scopes)) == len(scopes)
    assert out["placements"] == 2 ** len(scopes) and out["best_step_time_s"] <= out["expert_step_time_s"]
    prepared = prepare("rnnlm", "small", grouper="2017", cache_dir=str(tmp_path))
    spec = load_cluster("k80x2")
    ctx = BaselineContext(prepared.graph, prepared.grouping, spec, prepared.benchmark, prepared.config)
    placement = np.asarray(BASELINES["expert"](ctx), dtype=np.int64)
    for scope, groups in module.leaf_scopes(prepared.grouping.names, 2):
        placement[groups] = spec.device_names.index(out["best"][scope])
    measured = make_environment("sim", prepared, spec).measure_batch([placement.tolist()])[0]
    assert measured.step_time_s == out["best_step_time_s"]
    from tasks.search import file_start  # --output: that placement, per op, a warm start measured the same

    start = file_start(str(best), prepared, spec, "sim")
    assert start.step_time_s == out["best_step_time_s"] and start.note is None
    with pytest.raises(SystemExit, match=r"placements, more than --max-placements 4$"):
        module.main(["--model", "rnnlm", "--size", "small", "--cluster", "k80x2", "--depth", "2",
                     "--max-placements", "4", "--cache-dir", str(tmp_path)])
