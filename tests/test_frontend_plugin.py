"""A new front end is one module, one ``register`` call and its tests (issue 38, item 2).

``TOY`` below is such a module, written to a temporary folder and named in ``$PLACEMENT_FRONTENDS``
(compgraph.frontends.load_plugins): no other file of the project knows it. It runs end to end through
``placement experiment``, ``evaluate``, ``baselines`` and ``export --format json``, its flag (``--toy``)
generated into each command, its environments checked, its op class read by the cost model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TOY = '''"""A toy front end: a chain of dense layers, built with the project's IR (no framework)."""

from typing import Literal

from pydantic import Field

from compgraph.frontends import Frontend, SourceFlag, _Source, register
from compgraph.ir import Edge, Op, OpGraph
from compgraph.prepare import PreparedGraph


class ToySource(_Source):
    """A chain of ``layers`` dense layers of ``width`` units, on a batch of 64."""

    kind: Literal["toy"] = "toy"
    layers: int = Field(ge=1)
    width: int = 256


def prepare(src, grouper=None, num_groups=None, seed=0, cache_dir=None, int_bounds=None):
    from compgraph.grouping import group

    nbytes = 4 * 64 * src.width
    ops = [Op(f"toy/layer_{i}", "ToyDense", [(64, src.width)], [nbytes], flops=2.0 * 64 * src.width ** 2,
              bytes_accessed=3.0 * nbytes, alloc_bytes=nbytes, param_bytes=4 * src.width ** 2, op_class="dense")
           for i in range(src.layers)]
    graph = OpGraph(f"toy{src.layers}", ops, [Edge(i, i + 1, nbytes) for i in range(src.layers - 1)],
                    fetches=[ops[-1].name])
    grouping = group(graph, grouper or "heuristic", None, num_groups, seed)
    return PreparedGraph(None, "user", None, graph, grouping, None, (ops[-1].name,), {"format": "toy"})


register(Frontend("toy", ToySource, prepare, flags=(
    SourceFlag("toy", "layers", "a toy chain of N dense layers, instead of --model"),
    SourceFlag("toy_width", "width", "with --toy: the layers' width"),
), environments=frozenset({"sim"}), framework="toy"))
'''


@pytest.fixture()
def toy_env(tmp_path):
    """The environment of a command that loads the toy front end as a plugin."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "toy_frontend.py").write_text(TOY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(ROOT)]),
           "PLACEMENT_FRONTENDS": "toy_frontend", "PREFECT_HOME": str(tmp_path / "prefect"),
           "PLACEMENT_HOME": str(tmp_path / "home"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}
    env.pop("PREFECT_API_URL", None)
    return env


def _placement(env, *args, cwd):
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture()
def toy_module():
    """The toy front end registered in this process (removed after the test)."""
    import types

    from compgraph.frontends import FRONTENDS

    module = types.ModuleType("toy_frontend_inprocess")
    sys.modules[module.__name__] = module  # pydantic resolves the source model's annotations there
    try:
        exec(compile(TOY, "toy_frontend.py", "exec"), module.__dict__)
        yield module
    finally:
        FRONTENDS.pop("toy", None)
        sys.modules.pop(module.__name__, None)


def test_the_registry_answers_every_framework_question(toy_module):
    from cluster.cost_model import op_class
    from compgraph.frontends import (BenchmarkSource, GraphDefSource, TorchSource, environment_problem, export_formats,
                                     framework_of, is_user_graph, source_from_flags, tensorflow_source)
    from compgraph.ir import Op

    toy = source_from_flags({"toy": 3, "toy_width": 8})
    assert toy == toy_module.ToySource(layers=3, width=8) and is_user_graph(toy) and not tensorflow_source(toy)
    with pytest.raises(ValueError, match=r"not several \(graph_def, toy\)"):
        source_from_flags({"graph_def": "a.pb", "toy": 3})
    with pytest.raises(ValueError, match="toy_width is for toy"):
        source_from_flags({"toy_width": 8})
    assert source_from_flags({}) == BenchmarkSource()
    assert [framework_of(s) for s in (toy, BenchmarkSource(model="gpt"), BenchmarkSource(), GraphDefSource(path="a"),
                                      TorchSource(spec="m:f"))] == ["toy", "torch", "tf", "tf", "torch"]
    assert environment_problem(toy, "sim") is None and dict(export_formats(toy)) == {}
    assert "env: 'grappler'" in environment_problem(BenchmarkSource(model="gpt"), "grappler")
    assert environment_problem(BenchmarkSource(), "grappler") is None
    assert list(export_formats(BenchmarkSource(model="gpt"))) == ["torch"]
    assert list(export_formats(GraphDefSource(path="a"))) == ["tf"]
    op = Op("x", "ToyDense", [(2,)], [8], op_class="dense")
    assert op_class(op) == 0 and op_class("ToyDense") == 2 and op_class("MatMul") == 0 and op_class("aten.mm") == 0
    assert op_class("Conv2DBackpropFilter") == 1 and op_class("aten.convolution_backward") == 1
    with pytest.raises(ValueError, match="op 'x': op_class 'matmul'"):
        op_class(Op("x", "ToyDense", [(2,)], [8], op_class="matmul"))


@pytest.mark.slow  # eight commands started: about 30 s on a 2-core machine
def test_the_toy_plugin_registers_before_the_sources_and_the_commands_are_built(toy_env, tmp_path):
    code = ("from pydantic import TypeAdapter\n"
            "from compgraph.frontends import GraphSource, environment_problem, export_formats, prepare_source\n"
            "from cluster.cost_model import op_features\n"
            "src = TypeAdapter(GraphSource).validate_python({'kind': 'toy', 'layers': 3})\n"
            "prepared = prepare_source(src)\n"
            "print(prepared.graph.num_ops, prepared.framework, op_features(prepared.graph)[2].tolist())\n"
            "print(environment_problem(src, 'sim'), dict(export_formats(src)))\n"
            "print(environment_problem(src, 'real'))\n")
    r = subprocess.run([sys.executable, "-c", code], env=toy_env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "3 toy [0, 0, 0]"  # the cost model reads the front end's op class: dense
    assert lines[1] == "None {}"
    assert "env: 'real'" in lines[2] and "toy" in lines[2] and "'sim'" in lines[2]
    for command in ("experiment", "baselines", "evaluate", "export", "graph-stats", "train"):
        r = _placement(toy_env, command, "--help", cwd=tmp_path)
        assert r.returncode == 0 and "--toy-width" in r.stdout, (command, r.stdout, r.stderr)
    r = _placement(toy_env, "graph-stats", "--toy", "4", "--model", "nmt", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "error: give --model (a benchmark) or --toy, not both", r.stderr
    r = _placement(toy_env, "graph-stats", "--toy", "4", "--keras", "m:f", cwd=tmp_path)
    assert r.returncode == 2 and "not several (--keras, --toy)" in r.stderr, r.stderr
    r = _placement(toy_env, "graph-stats", "--toy-width", "8", cwd=tmp_path)
    assert r.returncode == 2 and "--toy-width is for --toy" in r.stderr, r.stderr


@pytest.mark.slow  # a Prefect server and an experiment: about a minute on a 2-core machine
def test_a_toy_front_end_runs_end_to_end_with_no_other_file_edited(toy_env, tmp_path):
    out = tmp_path / "out"
    r = _placement(toy_env, "experiment", "--toy", 6, "--cluster", "k80x2", "--methods", "single_gpu,local_search",
                   "--budget", 4, "--train-steps", 0, "--out-dir", out, "--json", tmp_path / "experiment.json",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "experiment.json").read_text())
    assert result["model"] == "toy6" and result["ops"] == 6 and set(result["methods"]) == {"single_gpu",
                                                                                           "local_search"}
    (run,) = (out / "runs").iterdir()

    r = _placement(toy_env, "export", run, "--method", "local_search", "--format", "json", "--output",
                   tmp_path / "placement.json", "--out-dir", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    placed = json.loads((tmp_path / "placement.json").read_text())
    assert placed["model"] == "toy6" and sorted(placed["devices"]) == [f"toy/layer_{i}" for i in range(6)]
    assert json.loads((run / "export.json").read_text())["framework"] == "toy"

    r = _placement(toy_env, "evaluate", "--toy", 6, "--cluster", "k80x2", "--placement", tmp_path / "placement.json",
                   "--out-dir", out, "--json", tmp_path / "evaluate.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    evaluated = json.loads((tmp_path / "evaluate.json").read_text())
    assert evaluated["step_time_s"] == pytest.approx(result["methods"]["local_search"]["step_time_s"])

    r = _placement(toy_env, "baselines", "--toy", 6, "--cluster", "k80x2", "--methods", "single_gpu,single_cpu",
                   "--out-dir", out, "--json", tmp_path / "baselines.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert set(json.loads((tmp_path / "baselines.json").read_text())["methods"]) == {"single_gpu", "single_cpu"}

    r = _placement(toy_env, "export", run, "--method", "local_search", "--format", "tf", "--toy", 6,
                   "--output", tmp_path / "p.pb", "--out-dir", out, cwd=tmp_path)
    assert r.returncode == 2 and "toy6 is a toy graph, with no TensorFlow GraphDef; use json" in r.stderr, r.stderr
    r = _placement(toy_env, "experiment", "--toy", 6, "--env", "grappler", "--out-dir", out, cwd=tmp_path)
    assert r.returncode == 2 and "'grappler'" in r.stderr, r.stderr
