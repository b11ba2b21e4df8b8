"""torch's OpInfo database on the opencl device (extras/validation/opdb.py): every float32
sample of the default part (ops with a native registration and every 4th other op, at most
40 samples each) runs in child processes, and none crashes, hangs or gives a wrong answer;
the whole database is the slow test. The tables of native operators and of the refused runs
by reason (docs/device/registrations.md, written by extras/validation/opdb_table.py) are the
ones the registrations and the recorded run (docs/opdb.json) give."""
import json

import pytest

from extras.validation import opdb, opdb_table


# Wrong answers still open, each with what goes wrong; nothing may crash or hang, and an op
# leaves this list when it is right (the test says so).
KNOWN_WRONG: dict = {}


def _check(report: opdb.Report) -> None:
    print(report.summary())
    unexpected = [r for r in report.problems() if r.verdict != "wrong" or r.op not in KNOWN_WRONG]
    problems = "\n".join(f"{r.verdict}: {r.op} sample {r.sample} ({r.variant}): {r.detail}" for r in unexpected)
    assert not problems, problems
    ran = {r.op for r in report.records}
    fixed = [op for op in KNOWN_WRONG if op in ran and op not in {r.op for r in report.problems()}]
    assert not fixed, f"right now, take them off KNOWN_WRONG: {fixed}"


def test_default_part_of_op_db(opencl_device):
    ops = opdb.select(opdb.float32_ops(), opdb.native_aten_names())
    report = opdb.run([opdb.op_key(op) for op in ops], max_samples=opdb.DEFAULT_MAX_SAMPLES)
    _check(report)
    counts = report.counts()
    assert counts["right"] > 10 * counts["refused"], "the fallback serves most of what the device's kernels refuse"


@pytest.mark.slow
def test_whole_op_db(opencl_device):
    _check(opdb.run([opdb.op_key(op) for op in opdb.float32_ops()]))


def test_a_crash_is_caught_and_blamed_on_its_sample(opencl_device):
    records = opdb.run_chunk(["abs", "neg"], crash_at="abs#0")
    crashed = [r for r in records if r.verdict == "crashed"]
    assert [(r.op, r.sample, r.variant) for r in crashed] == [("abs", 0, "fn")], crashed
    assert "SIGSEGV" in crashed[0].detail
    # The chunk went on after it: abs's other forms and neg have verdicts.
    assert [(r.variant, r.verdict) for r in records if r.op == "abs"] == [("fn", "crashed"), ("inplace", "right"),
                                                                           ("out", "right")]
    assert {r.verdict for r in records if r.op == "neg"} == {"right"}


def test_select_takes_every_native_op_and_a_spread_of_the_others():
    ops = opdb.float32_ops()
    chosen = {opdb.op_key(op) for op in opdb.select(ops, {"sum", "cat"})}
    assert {"sum", "cat"} <= chosen
    assert len(ops) // 5 < len(chosen) < len(ops) // 3, len(chosen)


def test_registrations_table_is_current(opencl_device):
    block = opdb_table.table_block()
    assert block, "docs/device/registrations.md lacks its table: python -m extras.validation.opdb --tables"
    record = json.loads(opdb_table.RECORD.read_text())
    assert block == opdb_table.render(opdb_table.registrations(), record), \
        "the device's registrations changed: python -m extras.validation.opdb --tables (or --all --record)"
    assert opdb_table.table_block(opdb_table.REFUSALS) == opdb_table.render_refusals(record), \
        "the refusals' reasons changed: python -m extras.validation.opdb --tables"
