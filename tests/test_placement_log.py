"""The placement log is one writer's: locked while open, released on close or when its process dies;
a resume with other settings is refused naming the setting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from placer.search import PlacementLog, PlacementLogBusy, settings_difference

HEADER = {"graph": "g", "groups": 3, "search": {"learner": "rl", "k": 8, "hidden_size": 256}}


def test_a_second_writer_is_refused_until_the_first_closes(tmp_path):
    path = tmp_path / "logs" / "run.jsonl"
    first = PlacementLog(path, HEADER)
    first.append({"index": 0, "placement": [0, 1, 0], "step_time_s": 1.0, "oom": False})
    with pytest.raises(PlacementLogBusy, match=r"in use by another run \(pid \d+\)"):
        PlacementLog(path, HEADER)
    assert len(path.read_text().splitlines()) == 2  # the refused writer neither truncated nor appended
    first.close()
    again = PlacementLog(path, HEADER)
    assert len(again.records) == 1
    again.close()


def test_the_lock_goes_with_a_killed_process(tmp_path):
    path = tmp_path / "run.jsonl"
    code = ("import sys\nfrom placer.search import PlacementLog\n"
            f"log = PlacementLog({str(path)!r}, {HEADER!r})\nprint('locked', flush=True)\nsys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"  # a handshake, not a sleep
        with pytest.raises(PlacementLogBusy, match=f"pid {child.pid}"):
            PlacementLog(path, HEADER)
    finally:
        child.kill()
        child.wait(timeout=120)
    PlacementLog(path, HEADER).close()  # SIGKILL left no lock behind


def test_other_settings_are_refused_naming_the_first_difference(tmp_path):
    path = tmp_path / "run.jsonl"
    PlacementLog(path, HEADER).close()
    other = {**HEADER, "search": {**HEADER["search"], "hidden_size": 64}}
    with pytest.raises(ValueError, match="search.hidden_size: 256 in the log, 64 now"):
        PlacementLog(path, other)
    assert settings_difference(HEADER, HEADER) == "none"
