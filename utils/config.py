"""Every setting of the project, in one table: the library's (opencl_functions/settings.py,
which the library reads) and the course tools' (below: setup.py's and the grader's).
Environment variables under one prefix, OCLF_, read when used, the older names still
working as aliases; the C++ side reads its settings through runtime/settings.hpp.

    config.get("DEVICE")        the value, "" when unset (OCLF_DEVICE, else OCL_DEVICE)
    config.variable("DEVICE")   the variable that gave it ("OCL_DEVICE" when the alias did)
    config.SETTINGS             the table, settings for everyone first (README's "Settings"
                                section lists the same; a test checks that every OCLF_ name in
                                the sources is in it)
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Dict

# By path, not `import opencl_functions.settings`: the package needs its built extension,
# and the grader and setup read settings before any build.
_spec = importlib.util.spec_from_file_location(
    "opencl_functions_settings", Path(__file__).resolve().parent.parent / "opencl_functions" / "settings.py")
_library = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
if not hasattr(_library, "SETTINGS"):
    _spec.loader.exec_module(_library)

PREFIX = _library.PREFIX
Setting = _library.Setting

_COURSE = [
    Setting("BUILD_JOBS", "the CPU count", "parallel compile jobs of setup.py", "setup.py"),
    Setting("GRADER_USER", "oclf-sandbox", "the account students' code runs as", "grading", ("GRADER_USER",)),
    Setting("GRADER_PYTHON", "the grader's own, if the account can run it", "the children's interpreter",
            "grading", ("GRADER_PYTHON",)),
    Setting("GRADER_NAMESPACES", "1 where the machine allows them",
            "0: run steps without PID and mount namespaces (the fallback of containers that forbid them)",
            "grading"),
    # BEGIN STAFF
    Setting("BUILD_DEVICE", "1 in package builds, 0 in in-place ones",
            "1: setup.py builds the opencl torch device too; 0: the library alone", "setup.py", staff=True),
    # The grader.
    Setting("GRADER_TIMEOUT", "120", "seconds per grading step", "grading", ("GRADER_TIMEOUT",), staff=True),
    Setting("GRADER_BUILD_TIMEOUT", "300", "seconds for the submission's build", "grading",
            ("GRADER_BUILD_TIMEOUT",), staff=True),
    Setting("GRADER_PERF_RUNS", "10", "timed runs per layer", "grading", ("GRADER_PERF_RUNS",), staff=True),
    Setting("GRADER_REF_CACHE", "build/grader-cache", "where the reference and ladder builds are kept", "grading",
            ("GRADER_REF_CACHE",), staff=True),
    Setting("GRADER_WORKDIR", "the system's temporary folder", "where gradings make their temporary folders",
            "grading", ("GRADER_WORKDIR",), staff=True),
    Setting("GRADER_KEEP", "unset", "1: keep a grading's temporary folder", "grading", ("GRADER_KEEP",), staff=True),
    Setting("GRADER_VENV", "/opt/oclf-venv", "the virtualenv of Gradescope's setup.sh and run_autograder",
            "grading/autograder", ("GRADER_VENV",), staff=True),
    # END STAFF
]
_ALL = [*_library.SETTINGS.values(), *_COURSE]
SETTINGS: Dict[str, Setting] = {s.name: s for s in sorted(_ALL, key=lambda s: s.staff)}  # stable: in order


def variable(name: str) -> str:
    """The environment variable that gives setting `name` its value (see opencl_functions.settings)."""
    return _library.variable(name, SETTINGS)


def get(name: str, default: str = "") -> str:
    """The value of setting `name`, read now; `default` when unset or empty."""
    return _library.get(name, default, SETTINGS)
