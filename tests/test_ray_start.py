"""A local Ray that fails to start is started again (placer.ray_session): Ray gives its raylet a
fixed 30 s to register, which a loaded 2-core machine can exceed."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from placer.ray_session import _MAX_TEMP_DIR_CHARS, ray_session  # noqa: E402


@pytest.fixture
def short_dir():
    """A folder whose path is short enough for Ray's unix sockets (pytest's tmp_path is not), removed after."""
    import shutil
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))
    assert len(str(folder)) <= _MAX_TEMP_DIR_CHARS
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _failing_first(monkeypatch, failures: int) -> list[str]:
    """Make the next ``failures`` calls of ``ray.init`` raise Ray's start-up timeout, then call the real
    one; returns the temp folders each call was given."""
    import ray

    real, folders = ray.init, []

    def init(*args, **kwargs):
        folders.append(kwargs["_temp_dir"])
        if len(folders) <= failures:
            raise Exception("The current node timed out during startup. This could happen because some of the "
                            "raylet failed to startup or the GCS has become overloaded.")
        return real(*args, **kwargs)

    monkeypatch.setattr(ray, "init", init)
    return folders


@pytest.mark.slow  # over 5 s here: a real Ray starts
def test_a_local_ray_that_timed_out_at_start_up_is_started_again_in_a_fresh_folder(monkeypatch, short_dir):
    import ray

    assert not ray.is_initialized()
    folders = _failing_first(monkeypatch, failures=1)
    with ray_session(num_cpus=1, temp_dir=short_dir) as started:
        assert started and ray.is_initialized()
        assert ray.get(ray.put(41)) + 1 == 42

        @ray.remote
        def niceness() -> int:
            import os

            return os.nice(0)

        # Ray's workers run at niceness 15 unless told: starved beside busy processes (controllers did not
        # start within 300 s beside three); a local Ray's run at the driver's priority
        import os

        assert ray.get(niceness.remote()) == os.nice(0)
    assert not ray.is_initialized()
    assert len(folders) == 2 and folders[0] != folders[1] and all(f.startswith(str(short_dir)) for f in folders)
    assert list(short_dir.iterdir()) == []  # both folders removed: the failed one at once, the other after


def test_a_local_ray_that_never_starts_says_how_often_it_tried(monkeypatch, short_dir):
    import ray

    folders = _failing_first(monkeypatch, failures=3)
    with pytest.raises(RuntimeError, match="did not start in 3 attempts.*timed out during startup"):
        with ray_session(num_cpus=1, temp_dir=short_dir):
            pass
    assert len(folders) == 3 and not ray.is_initialized() and list(short_dir.iterdir()) == []
