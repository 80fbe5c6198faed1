"""The bad-input corpus (issue: hostile inputs): every case runs the real ``placement`` command in a
child process and must exit 2, print one line, write nothing outside its out-dir (nor in the folder
it runs from) and stay under a memory ceiling (1 GB for the YAML cases, where an alias bomb used to
take more than 5 GB)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "bad_inputs"
ROOT = Path(__file__).resolve().parent.parent
YAML_RSS_LIMIT_KB = 1_000_000
RSS_LIMIT_KB = 4_000_000  # the rest: a CLI that imported TensorFlow to refuse a user graph


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_port_that_is_not_ray() -> tuple[int, object]:
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], server


# (id, args after `placement`, a piece of the one line). OUT: the out-dir; DATA: this corpus's files;
# BIG: a 2 MB spec written by the test; DEEP: a 600 kB spec nested 300,000 levels deep; BIGPB: a 2 MB .pb;
# HTTP: a port that answers HTTP but is not Ray; DEAD: a free port. Cases in HELD_LOGS and OUT_LINKS set up
# their out-dir first (a placement log another run holds; a folder of the out-dir that is a symlink out).
CASES = [
    # cluster specs (YAML): bounded before parsing
    ("yaml-alias-bomb", ["experiment", "--cluster", "DATA/billion_laughs.yaml"], "YAML aliases (*a0) are not allowed"),
    ("yaml-alias-bomb-baselines", ["baselines", "--cluster", "DATA/billion_laughs.yaml"], "YAML aliases"),
    ("yaml-too-large", ["experiment", "--cluster", "BIG"], "more than the 1,000,000 allowed"),
    ("yaml-unknown-key", ["experiment", "--cluster", "DATA/unknown_key.yaml"], "devices.1.bandwith: Extra inputs are not permitted"),
    ("yaml-infinite-bandwidth", ["experiment", "--cluster", "DATA/infinite_bandwidth.yaml"], "default_link.bandwidth"),
    ("yaml-negative-flops", ["experiment", "--cluster", "DATA/negative_flops.yaml"], "devices.1.peak_flops"),
    ("yaml-unknown-kind", ["experiment", "--cluster", "DATA/unknown_kind.yaml"], "devices.1.kind"),
    ("yaml-malformed", ["experiment", "--cluster", "DATA/malformed.yaml"], "cluster spec"),
    ("yaml-nested-too-deep", ["experiment", "--cluster", "DEEP"], "YAML nested more than 64 levels deep is not allowed"),
    ("yaml-nested-too-deep-baselines", ["baselines", "--cluster", "DEEP"], "deep.yaml: YAML nested more than 64 levels"),
    # names and numbers
    ("unknown-model", ["experiment", "--model", "rnn"], "unknown model 'rnn'"),
    ("unknown-size", ["experiment", "--size", "huge"], "unknown size 'huge'"),
    ("unknown-cluster", ["experiment", "--cluster", "k80x3"], "unknown cluster 'k80x3'"),
    ("missing-cluster-file", ["experiment", "--cluster", "DATA/nope.yaml"], "nope.yaml: no such file"),
    ("missing-cluster-file-baselines", ["baselines", "--cluster", "DATA/nope.yaml"], "nope.yaml: no such file"),
    ("k-without-rl", ["experiment", "--methods", "local_search", "--k", "4"], "--k 4: sets rl's K, and rl is not in --methods"),
    ("k-and-rl-k-disagree", ["experiment", "--methods", "rl", "--k", "4", "--learner-option", "rl.k=8"],
     "--k 4 and --learner-option rl.k=8 disagree"),
    ("learner-option-twice", ["experiment", "--methods", "rl", "--learner-option", "rl.hidden_size=64", "--learner-option",
                              "rl.hidden_size=32"], "--learner-option rl.hidden_size: given twice"),
    ("reproduce-methods-without-budget", ["reproduce", "--methods", "rl"], "--methods rl: learners search only with --budget > 0"),
    ("unknown-method", ["experiment", "--methods", "rl,magic"], "unknown --methods value 'magic'"),
    ("empty-methods", ["experiment", "--methods", ","], "--methods: empty"),
    ("unknown-grouper", ["experiment", "--grouper", "nope"], "unknown --grouper value 'nope'"),
    ("unknown-env", ["experiment", "--env", "cloud"], "unknown --env value 'cloud'"),
    ("unknown-learner-option", ["experiment", "--methods", "rl", "--learner-option", "rl.nope=1"], "rl"),
    ("bad-learner-option-value", ["experiment", "--methods", "rl", "--learner-option", "rl.hidden_size=-3"], "hidden_size"),
    ("bad-budget", ["experiment", "--budget", "0"], "--budget must be at least 1, got 0"),
    ("bad-seed", ["experiment", "--seed", "abc"], "(got 'abc')"),
    ("bad-k", ["experiment", "--k", "0"], "--k must be at least 1, got 0"),
    ("bad-workers", ["experiment", "--controllers", "1", "--workers", "-1"], "--workers must be at least 0"),
    ("bad-controllers", ["experiment", "--controllers", "-1"], "--controllers must be at least 0"),
    ("bad-num-groups", ["experiment", "--num-groups", "0"], "--num-groups must be at least 1"),
    ("unknown-option", ["experiment", "--no-such-option"], "No such option"),
    # users' graphs
    ("garbage-graph-def", ["experiment", "--graph-def", "DATA/garbage.pb"], "garbage.pb"),
    ("missing-graph-def", ["experiment", "--graph-def", "DATA/missing.pb"], "missing.pb': no such file"),
    ("empty-saved-model", ["experiment", "--saved-model", "OUT/../empty-saved-model"], "empty-saved-model"),
    ("keras-spec-malformed", ["experiment", "--keras", "not a spec"], "expected 'module:function'"),
    ("keras-exits-on-import", ["experiment", "--keras", "exits:build"], "it called sys.exit(0)"),
    ("graph-def-too-large", ["experiment", "--graph-def", "BIGPB", "--max-graph-mb", "1"], "more than the 1,000,000 allowed"),
    ("max-graph-mb-zero", ["baselines", "--graph-def", "DATA/garbage.pb", "--max-graph-mb", "0"], "--max-graph-mb must be at least 1"),
    ("int-bound-malformed", ["experiment", "--graph-def", "DATA/garbage.pb", "--int-bound", "tokens"], "expected NAME=N"),
    ("int-bound-not-positive", ["train", "--graph-def", "DATA/garbage.pb", "--method", "single_cpu", "--cluster", "cpu4",
                                "--int-bound", "tokens=0"], "N must be an integer >= 1"),
    ("int-bound-on-a-benchmark", ["experiment", "--int-bound", "x=3"], "--int-bound is for a user's graph"),
    ("train-expert-on-a-user-graph", ["train", "--graph-def", "DATA/garbage.pb", "--method", "expert", "--cluster", "cpu4"],
     "method 'expert' needs a benchmark's layer rules"),
    ("train-without-a-graph", ["train", "--method", "single_cpu", "--cluster", "cpu4"], "give --model"),
    ("two-graph-sources", ["experiment", "--graph-def", "DATA/garbage.pb", "--keras", "exits:build"], "not several"),
    ("torch-spec-malformed", ["experiment", "--torch", "not a spec"], "torch spec 'not a spec': expected 'module:function'"),
    ("torch-exits-on-import", ["graph-stats", "--torch", "exits:build"], "it called sys.exit(0)"),
    ("torch-optimizer-unknown", ["experiment", "--torch", "exits:build", "--torch-optimizer", "rmsprop"],
     "unknown --torch-optimizer value 'rmsprop'; valid: 'sgd' or 'adam'"),
    ("torch-optimizer-a-flag-name", ["graph-stats", "--torch", "exits:build", "--torch-optimizer", "size"],
     "unknown --torch-optimizer value 'size'; valid"),  # the value as given, not rewritten into a flag (--size)
    ("train-size-without-model", ["train", "--size", "paper", "--cluster", "cpu4", "--method", "single_cpu"],
     "--size is for --model: give --model (a benchmark) or a user's graph"),
    ("torch-on-real-exits", ["experiment", "--torch", "exits:build", "--env", "real", "--cluster", "cpu4"],
     "it called sys.exit(0)"),
    # a function (or module) that ends its own process: probed in a child before the in-process capture (issue 35)
    ("torch-function-os-exit", ["experiment", "--torch", "ends_process:exit_now"],
     "torch 'ends_process:exit_now': the function exit_now() ended its process (exit code 0) before returning"),
    ("torch-function-kills-itself", ["graph-stats", "--torch", "ends_process:kill_self"],
     "the function kill_self() ended its process (killed by SIGKILL) before returning"),
    ("torch-module-os-exit-on-import", ["experiment", "--torch", "ends_on_import:build"],
     "importing 'ends_on_import' ended its process (exit code 0) before returning"),
    ("torch-on-real-os-exit", ["experiment", "--torch", "ends_process:exit_now", "--env", "real", "--cluster", "cpu4"],
     "ended its process (exit code 0)"),
    ("keras-function-os-exit", ["experiment", "--keras", "ends_process:exit_now"],
     "keras 'ends_process:exit_now': the function exit_now() ended its process (exit code 0) before returning"),
    ("keras-function-kills-itself-baselines", ["baselines", "--keras", "ends_process:kill_self"],
     "ended its process (killed by SIGKILL)"),
    ("torch-on-real-without-its-gpus", ["experiment", "--model", "gpt", "--env", "real", "--cluster", "k80x2"],
     "device /gpu:0 runs on cuda:0, but this machine has 0 CUDA device(s)"),
    ("torch-repeats-zero", ["experiment", "--model", "gpt", "--env", "real", "--cluster", "cpu4", "--repeats", "0"],
     "--repeats must be at least 1, got 0"),
    ("tf-repeats", ["experiment", "--env", "real", "--cluster", "cpu4", "--repeats", "3"],
     "--repeats: for a PyTorch step"),
    ("torch-benchmark-on-grappler", ["experiment", "--model", "gpt", "--env", "grappler"],
     "'grappler' is TensorFlow's cost model of a GraphDef"),
    ("torch-benchmark-fidelity", ["fidelity", "--model", "gpt", "--cluster", "k80x2"], "`placement fidelity` runs TensorFlow"),
    ("torch-benchmark-calibrate", ["calibrate", "--model", "gpt", "--cluster", "cpu4"], "`placement calibrate` runs TensorFlow"),
    # where results go
    ("unwritable-out-dir", ["experiment", "--out-dir", "DATA/README.md/runs"], "is not writable"),
    ("json-folder-impossible", ["baselines", "--json", "DATA/README.md/x.json"], "--json"),
    ("dead-tracking-server", ["experiment", "--tracking-uri", "http://127.0.0.1:DEAD"], "does not answer"),
    ("tracking-uri-not-a-uri", ["experiment", "--tracking-uri", "notauri"], "scheme '' is not a tracking store"),
    ("tracking-uri-ftp", ["experiment", "--tracking-uri", "ftp://host/x"], "scheme 'ftp'"),
    ("tracking-uri-bad-ipv6", ["experiment", "--tracking-uri", "http://[::1"], "is not a URI"),
    ("reproduce-fit-missing", ["reproduce", "--fit", "DATA/missing.json"], "--fit"),
    # distributed search
    ("ray-address-dead", ["experiment", "--controllers", "1", "--ray-address", "127.0.0.1:DEAD"], "nothing answers there"),
    ("ray-address-not-ray", ["experiment", "--controllers", "1", "--ray-address", "127.0.0.1:HTTP"], "not a Ray (gRPC) server"),
    ("ray-address-without-controllers", ["experiment", "--ray-address", "auto"], "--ray-address needs --controllers"),
    ("policy-device-cuda-for-a-cpu-learner", ["experiment", "--controllers", "1", "--policy-device", "cuda"],
     "--policy-device 'cuda': learner 'post' runs its policy on cpu only"),
    # training
    ("train-gpu-method-on-cpu-cluster", ["train", "--model", "rnnlm", "--cluster", "DATA/cpu_only.yaml", "--method", "single_gpu"],
     "needs a GPU"),
    ("compare-without-store", ["compare", "--out-dir", "OUT"], "no MLflow store"),
    # a second identical run at once (its placement log held: HELD_LOGS), refused before Prefect starts (issue 35)
    ("second-run-at-once", ["experiment"], "rnnlm-small-k80x2-2017-post-seed0-budget1000.jsonl is in use by another run"),
    ("second-run-at-once-on-ray", ["experiment", "--controllers", "1", "--methods", "rl"],
     "rnnlm-small-k80x2-2017-rl-ray1-seed0-budget1000.jsonl is in use by another run"),
    # a folder of the out-dir that is a symlink leading out (OUT_LINKS), refused before any work (issue 35)
    ("runs-symlink-out", ["experiment"], "--out-dir: refusing to write"),
    ("placement-logs-symlink-out", ["compare-learners", "--learners", "rl"], "placement-logs: it resolves to"),
    ("checkpoints-symlink-out-train", ["train", "--model", "rnnlm", "--cluster", "cpu4", "--method", "rl"],
     "checkpoints: it resolves to"),
    ("mlflow-db-symlink-out", ["experiment"], "mlflow.db: it resolves to"),
    ("log-run-not-a-run", ["log-run", "DATA"], "is not a run folder"),
    # placement export (issue 35): a run is a record, not a program; the module the records name
    # (marker_on_import:build, importable here) leaves a file in the current folder if it ever runs
    ("export-record-names-a-module-tf", ["export", "DATA/run_names_a_module", "--method", "expert", "--format", "tf"],
     "give the graph's source on the command line"),
    ("export-record-names-a-module-torch", ["export", "DATA/run_names_a_module", "--method", "expert", "--format", "torch"],
     "give the graph's source on the command line"),
    ("export-tf-another-graph", ["export", "DATA/run_names_a_module", "--method", "expert", "--format", "tf", "--model",
                                 "rnnlm", "--out-dir", "OUT"], "is not the graph this run placed"),
    ("export-old-run-json", ["export", "DATA/old_run", "--method", "expert"], "predates the recorded placements"),
    ("export-old-run-torch", ["export", "DATA/old_run", "--method", "expert", "--format", "torch"],
     "predates the recorded placements"),
    ("export-malformed-record", ["export", "DATA/run_malformed", "--method", "expert"], "not JSON"),
    ("export-json-with-a-source", ["export", "DATA/run_names_a_module", "--method", "expert", "--model", "rnnlm"],
     "a graph source is for tf and torch"),
    ("export-output-into-the-run", ["export", "DATA/run_names_a_module", "--method", "expert", "--output",
                                    "DATA/run_names_a_module/results.json", "--force"], "inside the run folder"),
    ("export-output-exists", ["export", "DATA/run_names_a_module", "--method", "expert", "--output", "DATA/README.md"],
     "the file exists; give --force"),
    ("export-output-folder-impossible", ["export", "DATA/run_names_a_module", "--method", "expert", "--output",
                                         "DATA/README.md/x.json"], "is not a folder"),
    ("export-run-id-without-a-store", ["export", "0123456789abcdef0123456789abcdef", "--method", "expert"],
     "no MLflow store at"),
    ("export-unknown-format", ["export", "DATA/run_names_a_module", "--method", "expert", "--format", "onnx"],
     "unknown 'onnx'"),
]
if shutil.which("nvidia-smi") is None:
    CASES.append(("policy-device-cuda-without-cuda", ["experiment", "--methods", "rl", "--controllers", "1",
                                                      "--policy-device", "cuda"], "torch sees no CUDA device"))


HELD_LOGS = {"second-run-at-once": "rnnlm-small-k80x2-2017-post-seed0-budget1000",
             "second-run-at-once-on-ray": "rnnlm-small-k80x2-2017-rl-ray1-seed0-budget1000"}
"""Case -> the placement log (under OUT/placement-logs) the test holds open, as a run with those settings does."""
OUT_LINKS = {"runs-symlink-out": "runs", "placement-logs-symlink-out": "placement-logs",
             "checkpoints-symlink-out-train": "checkpoints", "mlflow-db-symlink-out": "mlflow.db"}
"""Case -> the entry of OUT made a symlink to a path outside (a folder there; for mlflow.db, a file not there yet)."""


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def not_ray():
    port, server = _http_port_that_is_not_ray()
    yield port
    server.shutdown()


SLOW_CASES = {"garbage-graph-def", "graph-def-too-large", "keras-exits-on-import", "reproduce-fit-missing"}  # over 5 s here
SLOW_CASES |= {"export-tf-another-graph"}  # prepares rnnlm small with TensorFlow
SLOW_CASES |= {"keras-function-os-exit", "keras-function-kills-itself-baselines",  # TensorFlow imported beside the probe
               "torch-function-os-exit", "second-run-at-once", "second-run-at-once-on-ray"}  # 4.3-7.6 s here
SLOW_CASES |= {"torch-on-real-os-exit", "torch-module-os-exit-on-import"}  # about 4.7-4.9 s here: near the line


@pytest.mark.parametrize("case, args, needle", [
    pytest.param(*c, id=c[0], marks=[pytest.mark.slow] if c[0] in SLOW_CASES else []) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing_outside(case, args, needle, tmp_path, not_ray):
    work, out = tmp_path / "work", tmp_path / "work" / "out"
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    (work / "empty-saved-model").mkdir(parents=True)
    (data / "big.yaml").write_text("name: big\n# " + "x" * 2_000_000 + "\n")
    (data / "big.pb").write_bytes(b"\0" * 2_000_000)
    (data / "deep.yaml").write_text("name: " + "[" * 300_000 + "]" * 300_000 + "\n")
    subs = {"DATA": str(data), "OUT": str(out), "BIGPB": str(data / "big.pb"), "BIG": str(data / "big.yaml"), "DEAD": str(_free_port()),
            "HTTP": str(not_ray), "DEEP": str(data / "deep.yaml")}
    held = None
    if case in HELD_LOGS:  # another run with the same settings, holding its placement log
        from placer.search import PlacementLog

        held = PlacementLog(out / "placement-logs" / f"{HELD_LOGS[case]}.jsonl", {"run": "another, at once"})
    if case in OUT_LINKS:
        target = tmp_path / "elsewhere" / OUT_LINKS[case]
        (target.parent if "." in target.name else target).mkdir(parents=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / OUT_LINKS[case]).symlink_to(target)
    argv = []
    for a in args:
        for key, value in subs.items():
            a = a.replace(key, value) if key in a and not a.startswith("--") else a
        argv.append(a)
    if "--out-dir" not in argv and argv[0] in ("experiment", "train", "reproduce", "compare-learners"):
        argv += ["--out-dir", str(out)]
    before = _files(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{data}{os.pathsep}{ROOT}"}
    stdout_f, stderr_f = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with stdout_f.open("w") as so, stderr_f.open("w") as se:
        child = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], cwd=work, env=env, stdout=so, stderr=se)
        timer = threading.Timer(600, child.kill)  # a hung case fails instead of hanging the suite
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)  # the child's own peak RSS (KB), not the session's
        finally:
            timer.cancel()
            if held is not None:
                held.close()
    rc = os.waitstatus_to_exitcode(status)
    stdout, stderr = stdout_f.read_text(), stderr_f.read_text()
    before |= {"stdout.txt", "stderr.txt"}
    lines = [line for line in (stdout + stderr).splitlines() if line.strip()]
    assert rc == 2, f"{case}: rc {rc}\n{stdout}\n{stderr}"
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{case}: {lines}"
    assert needle in lines[0], f"{case}: {lines[0]}"
    assert "Traceback" not in stderr
    new = {f for f in _files(tmp_path) - before if not f.startswith("work/out") and "__pycache__" not in f}
    assert new == set(), f"{case} wrote outside the out-dir: {sorted(new)}"
    limit = YAML_RSS_LIMIT_KB if case.startswith("yaml-") else RSS_LIMIT_KB
    assert usage.ru_maxrss < limit, f"{case}: peak RSS {usage.ru_maxrss / 1e3:.0f} MB"
