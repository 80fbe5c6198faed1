"""Progress as a run goes: one line as each stage starts and ends ([`stage`][tracking.progress.stage]), and for a
search a rich progress bar on the terminal and a line every 10 % of the budget or 30 s.

Lines go to the Prefect run logger (the Prefect UI shows them) and, when the ``placement`` command
asked for them ([`STAGE_LINES_ENV`][tracking.progress.STAGE_LINES_ENV]), to standard error as ``[  12.3 s] text`` -- on a terminal
or not (nohup, SLURM, a pipe), with the seconds since the command started.

A search line: placements done of budget, best step time so far, placements per second, time left.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Callable

STAGE_LINES_ENV = "PLACEMENT_STAGE_LINES"
"""Set to ``1`` (by the CLI) to print stage and search lines on standard error."""
START_ENV = "PLACEMENT_START_TIME"
"""``time.time()`` when the command started (set by the CLI); stage lines count seconds from it."""


def say(text: str) -> None:
    """One progress line: to standard error when [`STAGE_LINES_ENV`][tracking.progress.STAGE_LINES_ENV] is ``1``, and to the
    Prefect run logger when called inside a flow or task run."""
    if os.environ.get(STAGE_LINES_ENV) == "1":
        print_line(text)
    try:
        from prefect import get_run_logger

        get_run_logger().info(text)
    except Exception:  # noqa: BLE001 (outside a run: no run logger)
        pass


@contextlib.contextmanager
def stage(name: str, say: Callable[[str], None] = say) -> Iterator[dict]:
    """``with stage("preprocess") as out:`` says ``preprocess ...`` on entry and ``preprocess: done in
    2.1 s`` on exit, with ``out["result"]`` (a short text the block may set) appended; on an
    exception, ``preprocess: failed after 2.1 s (ValueError)``. ``say``: where the lines go
    (default [`say`][tracking.progress.say])."""
    say(f"{name} ...")
    start, out = time.monotonic(), {"result": ""}
    try:
        yield out
    except BaseException as exc:
        say(f"{name}: failed after {time.monotonic() - start:.1f} s ({type(exc).__name__})")
        raise
    extra = f": {out['result']}" if out["result"] else ""
    say(f"{name}: done in {time.monotonic() - start:.1f} s{extra}")


class SearchProgress:
    """A callable ``on_update(point)`` for a search's learning-curve points.

    Args:
        method: the learner's name (shown on the bar).
        budget: placements the search will sample (the bar's total).
        logger: anything with ``.info(str)`` (a Prefect run logger); ``None``: no log lines.
        bar: draw a rich progress bar on stderr (default: when stderr is a terminal).
        log_every_s: at most this many seconds between log lines (besides every 10 % of the budget).
    """

    def __init__(self, method: str, budget: int, logger=None, bar: bool | None = None, log_every_s: float = 30.0):
        self.method = method
        self.budget = max(1, int(budget))
        self.logger = logger
        self.log_every_s = log_every_s
        self.start = time.monotonic()
        self.last_log = self.start
        self.next_fraction = 0.1
        self.lines: list[str] = []
        self._bar = None
        if bar is None:
            bar = sys.stderr.isatty()
        if bar:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), transient=False)
            self._task = self._bar.add_task(f"search {method}", total=self.budget, best="", rate="")
            self._bar.start()

    def line(self, point: dict) -> str:
        """The progress line of ``point`` (``placements``, ``best_step_time_s``)."""
        done = int(point["placements"])
        elapsed = max(1e-9, time.monotonic() - self.start)
        rate = done / elapsed
        left = (self.budget - done) / rate if rate > 0 else float("nan")
        best = point.get("best_step_time_s")
        best_text = "none ran yet" if best is None else f"{best:.5g} s"
        return (f"search {self.method}: {done}/{self.budget} placements, best step time {best_text}, "
                f"{rate:.1f} placements/s, {left:.0f} s left")

    def __call__(self, point: dict) -> None:
        done = int(point["placements"])
        now = time.monotonic()
        if self._bar is not None:
            elapsed = max(1e-9, now - self.start)
            best = point.get("best_step_time_s")
            self._bar.update(self._task, completed=min(done, self.budget),
                             best="" if best is None else f"best {best:.5g} s", rate=f"{done / elapsed:.1f}/s")
            if done >= self.budget:
                self.close()
        if done >= self.next_fraction * self.budget or now - self.last_log >= self.log_every_s or done >= self.budget:
            text = self.line(point)
            self.lines.append(text)
            if self.logger is not None:
                self.logger.info(text)
            if self._bar is None and os.environ.get(STAGE_LINES_ENV) == "1":
                say(text) if self.logger is None else print_line(text)
            self.last_log = now
            while self.next_fraction * self.budget <= done:
                self.next_fraction += 0.1

    def close(self) -> None:
        """Stop the bar (idempotent)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def print_line(text: str) -> None:
    """``text`` on standard error as a stage line, without the Prefect logger (already given it)."""
    try:
        t0 = float(os.environ.get(START_ENV, ""))
    except ValueError:
        t0 = time.time()
    print(f"[{time.time() - t0:7.1f} s] {text}", file=sys.stderr, flush=True)


def chain(*callbacks: Callable[[dict], None] | None) -> Callable[[dict], None]:
    """One ``on_update`` calling each of ``callbacks`` (``None`` entries skipped) in order."""
    live = [c for c in callbacks if c is not None]

    def on_update(point: dict) -> None:
        for c in live:
            c(point)

    return on_update
