"""Every transcribed cell of the papers' tables equals the paper's text (cluster/tables.py).

The paper's lines come from ``tests/data/papers/table_lines.json``, a verbatim copy of the lines of
``../shared/papers/`` that the tables cite, so a plain clone runs every check; where ``../shared`` is
beside the clone, a test checks the copy against it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cluster.tables import LEARNER_COLUMNS, PAPER_FILES, ROWS, TABLES, table_rows

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"  # shared/ sits beside the clone
LINES = json.loads((Path(__file__).parent / "data" / "papers" / "table_lines.json").read_text(encoding="utf-8"))["files"]


def _line(paper_file: str, number: int) -> str:
    """Line ``number`` (1-based) of ``shared/papers/<paper_file>``, from the shipped copy."""
    copied = LINES.get(paper_file, {})
    assert str(number) in copied, f"copy line {number} of ../shared/papers/{paper_file} into tests/data/papers/table_lines.json"
    return copied[str(number)]


def test_the_copied_lines_equal_shared_papers():
    """The shipped lines are those checked against ../shared/papers/ (their recorded sha256), and equal to
    ../shared/papers/ itself where it sits beside the clone."""
    import hashlib

    data = Path(__file__).parent / "data"
    sums = json.loads((data / "shared_copies.sha256.json").read_text())["files"]
    copy = data / "papers" / "table_lines.json"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == sums["papers/table_lines.json"], \
        "tests/data/papers/table_lines.json changed since it was checked against ../shared/papers/"
    if not PAPERS.is_dir():
        return
    for paper_file, lines in LINES.items():
        text = (PAPERS / paper_file).read_text(encoding="utf-8").split("\n")
        for number, line in lines.items():
            assert text[int(number) - 1] == line, (paper_file, number)


def _fields(line: str) -> list[str]:
    line = re.sub(r"</?b>", "", line)
    return [f.strip() for f in re.split(r"[|\t]", line) if f.strip()]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.table}:{r.line}")
def test_every_cell_equals_the_paper_text(row):
    fields = _fields(_line(PAPER_FILES[row.table], row.line))
    if row.label:
        assert fields[0] == row.label
    for method, value in row.cells.items():
        printed = fields[row.columns[method]]
        assert printed == ("OOM" if value is None else f"{value:.{len(printed.split('.')[-1])}f}"), (method, printed)
    gpus_column = {"2017-table2": 3 if row.label else 0, "post-table1": 1}.get(row.table)
    if gpus_column is not None:  # EAGLE's machine has 4 GPUs in every row (Sec. IV-C), no column
        assert fields[gpus_column] == str(row.gpus)


def test_tables_cover_the_papers_rows_and_columns():
    assert [len(table_rows(t)) for t in TABLES] == [6, 11, 3]
    for t in TABLES:
        for r in table_rows(t):
            assert set(LEARNER_COLUMNS[t]) <= set(r.cells) and not set(LEARNER_COLUMNS[t]) & set(r.baselines())
    with pytest.raises(ValueError, match="unknown table 'nope'; valid: 2017-table2"):
        table_rows("nope")


def test_2017_op_counts_equal_table_1():
    from cluster.tables import PAPER_OP_COUNTS, op_count_factor

    for model, (ops, line) in PAPER_OP_COUNTS.items():
        fields = _fields(_line(PAPER_FILES["2017-table2"], line))
        assert fields[1] == str(ops), (model, fields)
    assert op_count_factor("2017-table2", "inception_v3", 5527) == pytest.approx(31180 / 5527)
    assert op_count_factor("post-table1", "inception_v3", 5527) == 1.0
    assert op_count_factor("2017-table2", "rnnlm", 10**6) == 1.0
