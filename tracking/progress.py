"""Progress of a search as it goes: a rich progress bar on the terminal and a line in a logger
(the Prefect run logger, so the Prefect UI shows it) every 10 % of the budget or 30 s.

Each line: placements done of budget, best step time so far, placements per second, time left.
"""

from __future__ import annotations

import sys
import time
from typing import Callable


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
            self.last_log = now
            while self.next_fraction * self.budget <= done:
                self.next_fraction += 0.1

    def close(self) -> None:
        """Stop the bar (idempotent)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def chain(*callbacks: Callable[[dict], None] | None) -> Callable[[dict], None]:
    """One ``on_update`` calling each of ``callbacks`` (``None`` entries skipped) in order."""
    live = [c for c in callbacks if c is not None]

    def on_update(point: dict) -> None:
        for c in live:
            c(point)

    return on_update
