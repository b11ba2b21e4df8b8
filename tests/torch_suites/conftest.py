"""Each test of torch's suites on the device ends in one verdict, written as a JSON line to
OCLF_TORCH_SUITES_LOG when it is set (extras/validation/torch_suites.py counts them):

    passed           every sample agreed with the CPU (and float64)
    wrong answer     an AssertionError (common.WrongAnswer, or torch's assertEqual)
    missing          the device raised where the CPU did not (common.Missing, NotImplementedError)
    not applicable   a skip whose reason starts with common.NOT_APPLICABLE
    skipped          any other skip (torch's own decorators on the OpInfo: skip, expectedFailure)
    error            anything else: a fault of the driver itself, to be fixed (never expected)

with the CPU-fallback operators the test reached. The warnings of these suites are torch's
samples' own (deprecations, dtype casts): they are not errors here.
"""
import json
import os

import pytest

LOG = os.environ.get("OCLF_TORCH_SUITES_LOG")
_VERDICT = pytest.StashKey[tuple]()


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.filterwarnings("ignore"))


@pytest.fixture(autouse=True)
def _fallbacks(request):
    import torch_opencl as device

    device.reset_fallback_ops()
    yield
    request.node.user_properties.append(("fallback", sorted(device.fallback_ops())))


def verdict(report, excinfo) -> str:
    from .common import Missing, NOT_APPLICABLE

    if report.passed:
        return "passed"
    if report.skipped:
        if hasattr(report, "wasxfail"):
            return "skipped"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "not applicable" if reason.startswith(("Skipped: " + NOT_APPLICABLE, NOT_APPLICABLE)) else "skipped"
    if excinfo is None:
        return "error"
    error = excinfo.value
    while error is not None:  # torch's OpInfo wrapper may raise a plain Exception from ours
        if isinstance(error, AssertionError):
            return "wrong answer"
        if isinstance(error, (Missing, NotImplementedError)):
            return "missing"
        error = error.__cause__
    return "error"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not LOG or not str(item.fspath).startswith(os.path.dirname(__file__)):
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        detail = ""
        if call.excinfo is not None:
            detail = f"{call.excinfo.typename}: " + (str(call.excinfo.value).strip().splitlines() or [""])[0]
        item.stash[_VERDICT] = (verdict(report, call.excinfo), detail[:400], round(report.duration, 2))
    elif report.when == "teardown" and _VERDICT in item.stash:
        # Written after the teardown of the fixture that read the fallback operators.
        kind, detail, seconds = item.stash[_VERDICT]
        fallback = dict(item.user_properties).get("fallback", [])
        line = json.dumps({"test": item.name, "cls": item.cls.__name__ if item.cls else "", "verdict": kind,
                           "detail": detail, "fallback": fallback, "seconds": seconds})
        with open(LOG, "a") as out:
            out.write(line + "\n")
