"""The graph cache cannot be poisoned: an entry whose content does not match its stored
hashes is one warning line and a rebuild, never a silent use."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from compgraph import cache
from compgraph import prepare as prepare_mod


@pytest.fixture()
def counted(monkeypatch):
    calls = []
    real = prepare_mod.build_benchmark_graph

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(prepare_mod, "build_benchmark_graph", counting)
    return calls


def _entry(tmp_path):
    (entry,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    return entry


def _rebuilt_after(tmp_path, caplog, counted, tamper):
    first = prepare_mod.prepare("rnnlm", "small", grouper="heuristic", cache_dir=tmp_path)
    original_bytes = first.graph_def.SerializeToString(deterministic=True)
    entry = _entry(tmp_path)
    assert counted == [1]
    hit = prepare_mod.prepare("rnnlm", "small", grouper="heuristic", cache_dir=tmp_path)
    assert counted == [1] and hit.graph == first.graph  # an intact entry is used
    tamper(entry)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="compgraph.cache"):
        again = prepare_mod.prepare("rnnlm", "small", grouper="heuristic", cache_dir=tmp_path)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert counted == [1, 1], "the tampered entry was used instead of rebuilt"
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "tampered or damaged" in warnings[0] and "rebuilding" in warnings[0] and str(entry) in warnings[0]
    # the rebuilt graph equals the original, and the rewritten entry is used again
    assert again.graph == first.graph
    assert cache.graph_to_dict(again.graph) == cache.graph_to_dict(first.graph)
    assert np.array_equal(again.grouping.op_group, first.grouping.op_group)
    assert again.graph_def.SerializeToString(deterministic=True) == original_bytes
    third = prepare_mod.prepare("rnnlm", "small", grouper="heuristic", cache_dir=tmp_path)
    assert counted == [1, 1] and third.graph == first.graph
    assert third.graph_def.SerializeToString(deterministic=True) == original_bytes
    return warnings[0]


@pytest.mark.slow  # over 5 s here
def test_flops_times_1000_in_graph_json_is_rebuilt(tmp_path, caplog, counted):
    def tamper(entry):
        body = json.loads((entry / "graph.json").read_text())
        for op in body["graph"]["ops"]:
            op["flops"] *= 1000
        assert any(op["flops"] > 0 for op in body["graph"]["ops"])
        (entry / "graph.json").write_text(json.dumps(body, separators=(",", ":")))

    msg = _rebuilt_after(tmp_path, caplog, counted, tamper)
    assert "graph.json does not match its stored SHA-256" in msg


def test_flipped_graph_def_bytes_are_rebuilt(tmp_path, caplog, counted):
    def tamper(entry):
        data = bytearray((entry / "graph_def.pb").read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 8):
            data[i] ^= 0xFF
        (entry / "graph_def.pb").write_bytes(bytes(data))

    msg = _rebuilt_after(tmp_path, caplog, counted, tamper)
    assert "graph_def.pb does not match its stored SHA-256" in msg


def test_rewritten_file_hash_without_entry_hash_is_caught(tmp_path, caplog, counted):
    """Updating a file's digest in meta.json alone does not pass: the entry hash covers
    the digests and the code version."""

    def tamper(entry):
        body = json.loads((entry / "graph.json").read_text())
        body["graph"]["ops"][0]["flops"] += 1.0
        data = json.dumps(body, separators=(",", ":")).encode()
        (entry / "graph.json").write_bytes(data)
        meta = json.loads((entry / "meta.json").read_text())
        meta["content"]["files"]["graph.json"] = cache.hashlib.sha256(data).hexdigest()
        (entry / "meta.json").write_text(json.dumps(meta))

    msg = _rebuilt_after(tmp_path, caplog, counted, tamper)
    assert "entry hash" in msg


def test_entry_hash_covers_code_version():
    h = {"graph.json": "a" * 64, "graph_def.pb": "b" * 64}
    assert cache.content_hash(h, "v1") != cache.content_hash(h, "v2")
    assert cache.content_hash(h, "v1") != cache.content_hash({**h, "graph.json": "c" * 64}, "v1")
    assert len(cache.content_hash(h, "v1")) == 64
