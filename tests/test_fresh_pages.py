"""benchmarks/fresh_pages.py's CPU form runs and records what decides a copy's fresh-page cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_cpu_form_times_new_and_reused_copies_and_records_the_host(tmp_path):
    out = tmp_path / "fresh.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fresh_pages.py"), "--sizes", "1,33",
                           "--repeats", "3", "--step", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result == json.loads(proc.stdout)
    assert result["device"] == "cpu" and result["repeats"] == 3
    assert set(result["host"]) >= {"thp_enabled", "thp_defrag", "glibc", "THP_MEM_ALLOC_ENABLE", "kernel"}
    assert [r["bytes"] for r in result["rows"]] == [2**20, 33 * 2**20]
    for r in result["rows"]:
        assert len(r["new_s"]) == len(r["reused_s"]) == 3 and min(r["new_s"] + r["reused_s"]) > 0
        assert r["new"]["median_s"] > 0 and r["reused"]["iqr_s"] is not None
        assert 0 <= r["paid"] <= 3 and r["fresh_s_per_byte"] >= 0
    assert [r["bytes"] for r in result["step_rows"]] == [2**20, 33 * 2**20]
    for r in result["step_rows"]:
        assert all(len(r[k]) == 3 and r[k[:-2]]["median_s"] > 0 for k in ("to_host_s", "add_s", "back_s"))


def test_a_heap_history_is_recorded_with_each_copys_page_faults(tmp_path):
    """``--history``/``--trim`` leave freed heap memory first and say so; each copy into new memory has its
    minor page faults. A copy in a new process faults in every page; after the history one may not,
    depending on where glibc put what (``tests/test_torch_placed.py`` checks that on a placed step)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fresh_pages.py"), "--sizes", "40",
                           "--repeats", "2", "--history", "200", "--trim"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["history"]["chunks"] == 8 and result["history"]["chunk_bytes"] == 24 << 20
    assert result["history"]["malloc_trim"] in (0, 1)
    faults = result["rows"][0]["new_faults"]
    assert len(faults) == 2 and all(isinstance(f, int) and f >= 0 for f in faults)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fresh_pages.py"), "--trim"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2 and "--trim: only with --history" in proc.stderr


def test_bad_sizes_are_refused_naming_the_option(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fresh_pages.py"), "--sizes", "big"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2 and "--sizes" in proc.stderr and "'big'" in proc.stderr
