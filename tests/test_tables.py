"""Every transcribed cell of the papers' tables equals the paper's text (cluster/tables.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster.tables import LEARNER_COLUMNS, PAPER_FILES, ROWS, TABLES, table_rows

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"  # shared/ sits beside the clone


def _fields(line: str) -> list[str]:
    line = re.sub(r"</?b>", "", line)
    return [f.strip() for f in re.split(r"[|\t]", line) if f.strip()]


@pytest.mark.skipif(not PAPERS.is_dir(), reason="shared/papers/ is not beside the repository")
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.table}:{r.line}")
def test_every_cell_equals_the_paper_text(row):
    lines = (PAPERS / PAPER_FILES[row.table]).read_text(encoding="utf-8").split("\n")
    fields = _fields(lines[row.line - 1])
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


@pytest.mark.skipif(not PAPERS.is_dir(), reason="shared/papers/ is not beside the repository")
def test_2017_op_counts_equal_table_1():
    from cluster.tables import PAPER_OP_COUNTS, op_count_factor

    lines = (PAPERS / PAPER_FILES["2017-table2"]).read_text(encoding="utf-8").split("\n")
    for model, (ops, line) in PAPER_OP_COUNTS.items():
        fields = _fields(lines[line - 1])
        assert fields[1] == str(ops), (model, fields)
    assert op_count_factor("2017-table2", "inception_v3", 5527) == pytest.approx(31180 / 5527)
    assert op_count_factor("post-table1", "inception_v3", 5527) == 1.0
    assert op_count_factor("2017-table2", "rnnlm", 10**6) == 1.0
