"""Shared pytest fixtures: `ocl` is the opencl_functions module, a skip with the reason
when its extension is not built or no OpenCL device can be opened; a kernel's build error
is printed once, at the end of the run."""
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tests take the device-derived defaults: no measuring at first use, and nothing written to
# the user's tuning cache (tests of tuning turn it on with a cache folder of their own).
os.environ.setdefault("OCLF_TUNE", "0")


@functools.lru_cache(maxsize=None)
def _unavailable_reason():
    try:
        import opencl_functions
    except ImportError as err:
        return f"opencl_functions is not built ({err}); run make build"
    try:
        opencl_functions.device_info()
    except opencl_functions.OpenCLError as err:
        return f"no usable OpenCL device: {err}"
    return None


@pytest.fixture(scope="session")
def ocl():
    reason = _unavailable_reason()
    if reason:
        pytest.skip(reason)
    import opencl_functions

    opencl_functions.fill_outputs_with_nan = True  # an unwritten output fails, not passes by chance
    return opencl_functions


# A kernel that does not compile fails every test that launches it: each failure keeps its
# one line, and the build log (with the .cl file's path, line and options) is printed once,
# at the end of the run.
_build_errors: dict = {}


class _OneLine:
    """A failure's report as one line, in every --tb style and in the short summary."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.reprcrash = self

    def toterminal(self, tw) -> None:
        tw.line(self.message)

    def __str__(self) -> str:
        return self.message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if type(error).__name__ == "KernelBuildError":
        _build_errors.setdefault(str(error), []).append(item.nodeid)
        report = outcome.get_result()
        if len(_build_errors[str(error)]) > 1 or len(_build_errors) > 1:
            report.longrepr = _OneLine(f"{item.nodeid}: the kernel does not compile (build log at the end)")
            report.sections = []  # the compiler's stderr, the same every time


def pytest_terminal_summary(terminalreporter):
    for message, tests in _build_errors.items():
        terminalreporter.section("a kernel does not compile", red=True)
        terminalreporter.write_line(f"{len(tests)} test(s) failed on this build error, first {tests[0]}:\n")
        terminalreporter.write_line(message)


# BEGIN STAFF
# Staff only: `opencl_device` is torch_opencl (torch's `opencl` device), a skip
# with the reason when it is not built or cannot open a device; `ref_cache` is the grader's
# reference and ladder build, made once per session.
ROOT = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def _device_unavailable_reason():
    try:
        import torch_opencl as device
    except ImportError as err:
        return f"the opencl device is not built ({err}); run make device"
    if not device.is_available():
        return "no usable OpenCL device for the opencl torch device"
    return None


@pytest.fixture(scope="session")
def opencl_device():
    """torch_opencl (torch's `opencl` device registered), or a skip with the reason."""
    reason = _device_unavailable_reason()
    if reason:
        pytest.skip(reason)
    import torch_opencl

    return torch_opencl


@pytest.fixture(scope="session")
def ref_cache(tmp_path_factory):
    """One reference and ladder build and warm kernel cache for every grading in the session,
    made as Gradescope's setup.sh makes it (--prepare-only)."""
    cache = tmp_path_factory.mktemp("ref-cache")
    proc = subprocess.run([sys.executable, "-m", "grading.grade", "--prepare-only", "--ref-cache", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert list(cache.glob("*/ladder/reference/opencl_functions/_core*.so"))
    return cache
# END STAFF
