"""The driver of torch's suites on the device (tests/torch_suites, extras/validation/torch_suites.py)
sorts failures as it says: a result off the CPU's is a wrong answer (not equal elements topk
picks otherwise, nor a dtype torch's meta functions give devices other than the CPU, nor a
compiled answer Inductor gives on the CPU too), a device
refusal is missing, torch's plain Exception wrapping ours keeps our kind; the runner counts a test xdist
saw fail without a verdict as crashed, and a later log's verdict replaces an earlier one's."""
import json
from types import SimpleNamespace

import pytest
import torch

from extras.validation import torch_suites


@pytest.fixture(scope="module")
def common(opencl_device):
    from torch_suites import common

    return common


def test_a_result_off_the_cpus_is_a_problem_and_float64_decides_drift(common):
    x = torch.linspace(-3, 3, 33)
    assert common.compare(x.to("opencl"), x) is None
    assert "flat index" in common.compare((x + 1e-3).to("opencl"), x, lambda: x.double())
    # one float32 rounding away: within the CPU's own error against float64, so right
    assert common.compare((x + 2e-7).to("opencl"), x, lambda: x.double()) is None


def test_equal_elements_and_other_devices_dtypes_are_not_wrong_answers(common):
    """topk picks any of equal elements (its indices must still pick the CPU's values), and a
    result's dtype may differ from the CPU's where torch's meta functions say other devices'
    does (native_layer_norm's statistics of bfloat16 stay float32, as on CUDA)."""
    from torch.testing._internal.common_methods_invocations import SampleInput, op_db
    from torch_suites import test_ops_common as suite

    topk = next(op for op in op_db if op.name == "topk")
    x = torch.tensor([[1, 3, 3, 2]])
    sample = SampleInput(x, args=(2, 1))
    expected = torch.topk(x, 2, 1)
    ties = (torch.tensor([[3, 3]]), torch.tensor([[2, 1]]))
    assert suite._same_order(topk, sample, ties, tuple(expected))
    assert not suite._same_order(topk, sample, (torch.tensor([[3, 2]]), torch.tensor([[2, 3]])), tuple(expected))
    assert not suite._same_order(topk, sample, (torch.tensor([[3, 9]]), torch.tensor([[2, 1]])), tuple(expected))

    norm = next(op for op in op_db if op.name == "native_layer_norm")
    x = torch.randn(2, 3, 4).to(torch.bfloat16)
    sample = SampleInput(x, args=([4], None, None, 1e-5))
    expected = torch.native_layer_norm(x, [4], None, None, 1e-5)
    got = tuple(t.to("opencl") for t in torch.native_layer_norm(x.float(), [4], None, None, 1e-5))
    got = (got[0].to(torch.bfloat16), got[1], got[2])  # the statistics in float32, as on CUDA
    judged = suite._in_cpus_dtypes(norm, sample, got, expected)
    assert [t.dtype for t in judged] == [torch.bfloat16] * 3
    assert common.compare(judged, expected) is None
    wrong = (got[0], got[1], got[2].double())  # not what the meta function says: judged as it is
    assert suite._in_cpus_dtypes(norm, sample, wrong, expected) is wrong


@pytest.mark.filterwarnings("ignore:var_mean:UserWarning")  # degrees of freedom <= 0: the empty sample
def test_an_answer_inductor_gives_on_the_cpu_too_is_not_the_devices(common):
    """var_mean of an empty tensor compiled: Inductor's Welford gives the mean 0 (eager NaN) with
    its C++ back end on the CPU as with the device's code generation."""
    from torch.testing._internal.common_methods_invocations import SampleInput, op_db
    from torch_suites import test_compiled_ops as suite

    var_mean = next(op for op in op_db if op.name == "var_mean")
    sample = SampleInput(torch.empty(0, 5), args=(True,))
    moved = suite.to_device(sample)
    got = suite._compiled(var_mean)(moved.input, moved.args, moved.kwargs)
    assert got[1].item() == 0.0 and torch.var_mean(torch.empty(0, 5), unbiased=True)[1].isnan()
    assert suite._inductors_own(var_mean, sample, got)
    assert not suite._inductors_own(var_mean, sample, (got[0], got[1] + 1))


def _report(excinfo, passed=False, skipped=None):
    return SimpleNamespace(passed=passed, skipped=skipped is not None, longrepr=("f", 1, skipped or ""))


def test_failures_are_sorted_by_their_exception(common):
    from torch_suites.conftest import verdict

    def raised(error):
        try:
            raise error
        except Exception:  # noqa: BLE001
            return pytest.ExceptionInfo.from_current()

    assert verdict(_report(None), raised(common.WrongAnswer("off"))) == "wrong answer"
    assert verdict(_report(None), raised(common.Missing("no kernel"))) == "missing"
    assert verdict(_report(None), raised(NotImplementedError("no kernel"))) == "missing"
    assert verdict(_report(None), raised(ValueError("a bug of the driver"))) == "error"
    try:  # torch's OpInfo wrapper raises a plain Exception from ours
        raise Exception("Caused by sample input") from common.Missing("no kernel")
    except Exception:  # noqa: BLE001
        assert verdict(_report(None), pytest.ExceptionInfo.from_current()) == "missing"
    assert verdict(_report(None, skipped="Skipped: not applicable: no out= form"), None) == "not applicable"
    assert verdict(_report(None, skipped="Skipped: Only runs on cuda"), None) == "skipped"


def test_the_runner_counts_crashes_and_keeps_the_last_verdict(tmp_path):
    first, second = tmp_path / "a" / "full.jsonl", tmp_path / "b" / "full.jsonl"
    for log in (first, second):
        log.parent.mkdir()

    def row(test, cls, verdict_):
        return json.dumps({"test": test, "cls": cls, "verdict": verdict_, "detail": "", "fallback": ["aten::x"],
                           "seconds": 1}) + "\n"
    first.write_text(row("test_out_add_opencl_float32", "TestCommonPRIVATEUSE1", "wrong answer") +
                     row("test_pickle_nn_ReLU_opencl_float32", "TestModuleOPENCL", "passed"))
    second.write_text(row("test_out_add_opencl_float32", "TestCommonPRIVATEUSE1", "passed"))
    (first.parent / "junit.xml").write_text(
        '<testsuites><testsuite><testcase classname="test_ops_common.TestCommonPRIVATEUSE1" '
        'name="test_errors_cat_opencl"><error message="worker crashed"/></testcase></testsuite></testsuites>')
    rows = torch_suites.read(first, first.parent / "junit.xml")
    assert [r["verdict"] for r in rows] == ["wrong answer", "passed", "crashed"]
    table = torch_suites.counts(rows)
    assert table["TestCommon (op_db)"]["test_out"]["wrong answer"] == 1
    assert table["TestCommon (op_db)"]["test_errors"]["crashed"] == 1
    assert table["TestModule (module_db)"]["test_pickle"]["passed"] == 1
    assert torch_suites.main(["--table", f"{first},{second}"]) == 1  # the crash still counts
    second.write_text(row("test_errors_cat_opencl", "TestCommonPRIVATEUSE1", "passed"))
    assert torch_suites.main(["--table", f"{first},{second}"]) == 1  # the wrong answer of the first log
