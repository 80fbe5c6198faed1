"""The papers' step-time tables as data, each cell with the line of the paper it comes from.

Three tables of measured seconds per training step (``None`` = OOM), transcribed from the
plain-text papers in ``shared/papers/`` (``tests/test_tables.py`` checks every cell against
that text):

* ``2017-table2``: Mirhoseini et al., ICML 2017, Table 2 (1 Haswell + 2 or 4 K80; TensorFlow of
  2017): single-CPU, single-GPU, Scotch, MinCut, expert, and the RL placement.
* ``post-table1``: Gao, Chen, Li, NeurIPS 2018 (Post), Table 1 (Google Cloud: 8-core Broadwell,
  2, 4 or 8 K80): single-GPU, expert, METIS, and the learners (policy gradient, Post).
* ``eagle-table4``: Lan, Chen, Li, IPDPS 2021 (EAGLE), Table IV (2x E5-2650 v4 + 4 P100,
  TensorFlow 1.12): single-GPU, human expert, and the learners (Hierarchical Planner, Post,
  EAGLE with PPO and with PPO + CE). **Never fitted on**: it is the out-of-sample table.

Each row names the model the way ``placement experiment`` builds it (``model``, ``size``) at
that table's settings, and the preset of its machine (``cluster``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the plain-text papers (``shared/papers/``) the tables are transcribed from.
PAPER_FILES = {
    "2017-table2": "000_410c0f0fb709120d.txt",
    "post-table1": "003_0d03b9704a111bca.txt",
    "eagle-table4": "002_8ec9a5579b221654.txt",
}
TABLES = tuple(PAPER_FILES)

#: methods that are learners in the tables (printed beside ours, never fitted on).
LEARNER_COLUMNS = {
    "2017-table2": ("rl",),
    "post-table1": ("pg", "post"),
    "eagle-table4": ("hierarchical", "post", "eagle", "eagle_ce"),
}


@dataclass(frozen=True)
class PaperRow:
    """One row of a paper's table.

    Attributes:
        table: one of [`TABLES`][cluster.tables.TABLES].
        model, size: how ``placement experiment`` builds the row's model (``--model``, ``--size``).
        gpus: GPUs of the row's machine.
        cluster: the preset of the row's machine (``--cluster``).
        cells: method -> seconds per step in the paper (``None``: OOM); baselines under our
            method names (``single_cpu``, ``single_gpu``, ``expert``, ``scotch``, ``mincut``,
            ``metis``), learners under [`LEARNER_COLUMNS`][cluster.tables.LEARNER_COLUMNS].
        label: the row's label in the paper, as printed (e.g. ``NMT (4-layer)``).
        line: 1-based line of the paper's text file ([`PAPER_FILES`][cluster.tables.PAPER_FILES]) holding the row.
        columns: for each method of ``cells``, the 0-based index of its column on that line
            (split at ``|`` or tabs, empty fields dropped).
        aliases: a column computed by another of our baselines: the table's own expert where it
            is one GPU (Post Sec. 4: "places the entire model on a single GPU for Inception-V3 and
            ResNet"; EAGLE Sec. IV-B: TF-slim's Inception-V3 on one GPU, no model-parallel BERT).
    """

    table: str
    model: str
    size: str
    gpus: int
    cluster: str
    cells: dict[str, float | None]
    label: str
    line: int
    columns: dict[str, int]
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """``<paper file>:<line>``: where the row is printed."""
        return f"shared/papers/{PAPER_FILES[self.table]}:{self.line}"

    def baselines(self) -> dict[str, float | None]:
        """The row's baseline cells (learners left out)."""
        return {m: v for m, v in self.cells.items() if m not in LEARNER_COLUMNS[self.table]}


_T2 = {"single_cpu": 1, "single_gpu": 2, "scotch": 4, "mincut": 5, "expert": 6, "rl": 7}
_T2_CONT = {"scotch": 1, "mincut": 2, "expert": 3, "rl": 4}  # a 4-GPU line: the model's cells are on the line above


def _t2(model: str, gpus: int, line: int, label: str, **cells) -> PaperRow:
    return PaperRow("2017-table2", model, "paper", gpus, f"k80x{gpus}", cells, label, line,
                    {m: (_T2 if gpus == 2 else _T2_CONT)[m] for m in cells})


_P1 = {"single_gpu": 2, "expert": 3, "metis": 4, "pg": 5, "post": 6}


def _p1(model: str, size: str, gpus: int, line: int, label: str, *values) -> PaperRow:
    cells = dict(zip(_P1, values))
    aliases = {} if model in ("rnnlm", "nmt") else {"expert": "single_gpu"}  # Post's expert for CNNs: one GPU
    return PaperRow("post-table1", model, size, gpus, f"gcp-k80x{gpus}", cells, label, line, dict(_P1), aliases)


_E4 = {"single_gpu": 1, "expert": 2, "hierarchical": 3, "post": 4, "eagle": 5, "eagle_ce": 6}


def _e4(model: str, size: str, line: int, label: str, *values) -> PaperRow:
    aliases = {} if model == "gnmt" else {"expert": "single_gpu"}  # TF-slim's Inception; BERT has no expert
    return PaperRow("eagle-table4", model, size, 4, "p100x4", dict(zip(_E4, values)), label, line, dict(_E4), aliases)


#: Every transcribed row. The single-CPU and single-GPU cells of 2017 Table 2 are printed once
#: per model (on its 2-GPU line) and hold for both machines: they are listed on the 2-GPU row only.
ROWS: tuple[PaperRow, ...] = (
    _t2("rnnlm", 2, 154, "RNNLM (batch 64)", single_cpu=6.89, single_gpu=1.57, scotch=13.43, mincut=11.94, expert=3.81, rl=1.57),
    _t2("rnnlm", 4, 155, "", scotch=11.52, mincut=10.44, expert=4.46, rl=1.57),
    _t2("nmt", 2, 156, "NMT (batch 64)", single_cpu=10.72, single_gpu=None, scotch=14.19, mincut=11.54, expert=4.99, rl=4.04),
    _t2("nmt", 4, 157, "", scotch=11.23, mincut=11.78, expert=4.73, rl=3.92),
    _t2("inception_v3", 2, 158, "Inception-V3 (batch 32)", single_cpu=26.21, single_gpu=4.60, scotch=25.24, mincut=22.88,
        expert=11.22, rl=4.60),
    _t2("inception_v3", 4, 159, "", scotch=23.41, mincut=24.52, expert=10.65, rl=3.85),
    _p1("rnnlm", "post", 2, 181, "RNNLM", 0.44, 0.89, 1.81, 0.66, 0.44),
    _p1("resnet50", "paper", 2, 182, "ResNet-50", 0.86, 0.86, 4.47, 1.49, 0.86),
    _p1("resnet200", "paper", 2, 183, "ResNet-200", 2.75, 2.75, 11.63, 3.62, 2.75),
    _p1("resnet50", "paper", 4, 184, "ResNet-50", 0.86, 0.86, 4.21, 2.37, 0.86),
    _p1("resnet101", "paper", 8, 185, "ResNet-101", 1.59, 1.59, 7.31, 2.90, 1.59),
    _p1("inception_v3", "paper", 2, 186, "Inception-V3", 1.79, 1.79, 6.76, 2.15, 1.30),
    _p1("inception_v3", "paper", 4, 187, "Inception-V3", 1.75, 1.75, 6.07, 1.82, 1.19),
    _p1("inception_v3", "paper", 8, 188, "Inception-V3", 1.78, 1.78, 7.35, 2.67, 1.29),
    _p1("nmt", "post2", 2, 189, "NMT (2-layer)", None, 2.05, 7.47, 2.30, 1.22),
    _p1("nmt", "post4", 4, 190, "NMT (4-layer)", None, 3.43, 11.04, 4.08, 2.13),
    _p1("nmt", "post8", 8, 191, "NMT (8-layer)", None, 5.11, 12.74, 5.35, 2.20),
    _e4("inception_v3", "eagle", 259, "Inception-V3", 0.071, 0.071, 0.067, 0.067, 0.067, 0.067),
    _e4("gnmt", "paper", 260, "GNMT", None, 1.661, 1.418, 2.031, 1.379, 1.503),
    _e4("bert_base", "paper", 261, "BERT", None, None, 5.534, 2.812, 2.287, 2.488),
)


def table_rows(table: str) -> list[PaperRow]:
    """The rows of ``table`` in the paper's order.

    Raises:
        ValueError: an unknown table (lists the valid ones).
    """
    if table not in PAPER_FILES:
        raise ValueError(f"unknown table {table!r}; valid: {', '.join(TABLES)}")
    return [r for r in ROWS if r.table == table]


#: 2017 Table 1: operations in the paper's training graphs (model -> (ops, line of the paper)).
#: Our graphs of the same models have fewer ops (e.g. fused batch norm in Inception-V3), and the
#: executor's per-op overhead is paid per op of the graph TensorFlow ran, so the 2017 rows are
#: measured with the overhead scaled by the paper's op count over ours ([`op_count_factor`][cluster.tables.op_count_factor]).
PAPER_OP_COUNTS: dict[str, tuple[int, int]] = {"rnnlm": (8943, 122), "nmt": (22097, 123), "inception_v3": (31180, 124)}


def op_count_factor(table: str, model: str, num_ops: int) -> float:
    """A named software term of 2017 Table 2's rows: the paper's op count (2017 Table 1) over ours
    (``num_ops``), the factor on the per-op executor overhead; 1.0 for other tables and models
    (their papers give no op counts) and for graphs larger than the paper's."""
    if table != "2017-table2" or model not in PAPER_OP_COUNTS or num_ops <= 0:
        return 1.0
    return max(1.0, PAPER_OP_COUNTS[model][0] / num_ops)
