"""Settings in one place (opencl_functions/settings.py, which the course tools load through
grading.library): OCLF_ names first, the older names as aliases, read when used, on the
Python and the C++ side alike; the README's table is that table, and every OCLF_ name the
sources use is in it."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grading.library import settings

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["opencl_functions", "utils", "grading", "extras", "scripts", "Makefile", "setup.py", "tests.py",
           "simple_sanity_check.py", "inference_gpt2.py", "inference_resnet.py", "inference_bird.py"]


def test_oclf_name_first_then_its_alias(monkeypatch):
    monkeypatch.delenv("OCLF_DEVICE", raising=False)
    monkeypatch.setenv("OCL_DEVICE", "old")
    assert settings.get("DEVICE") == "old" and settings.variable("DEVICE") == "OCL_DEVICE"
    monkeypatch.setenv("OCLF_DEVICE", "new")
    assert settings.get("DEVICE") == "new" and settings.variable("DEVICE") == "OCLF_DEVICE"
    monkeypatch.setenv("OCLF_DEVICE", "")
    assert settings.get("DEVICE") == "old"


# BEGIN STAFF
def test_settings_are_read_when_used(monkeypatch):
    monkeypatch.setenv("OCLF_GRADER_TIMEOUT", "7")
    from grading.workspace import Options

    assert Options().timeout_s == 7.0
    monkeypatch.setenv("GRADER_TIMEOUT", "9")
    monkeypatch.delenv("OCLF_GRADER_TIMEOUT")
    assert Options().timeout_s == 9.0
# END STAFF


def _device_error(env: dict) -> str:
    code = ("import json, opencl_functions as o\n"
            "try:\n    o.device_info(); print(json.dumps('opened'))\n"
            "except o.OpenCLError as e:\n    print(json.dumps(str(e)))\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("OCLF_DEVICE", "OCL_DEVICE")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cpp_side_reads_the_same_names(ocl):
    assert _device_error({"OCLF_DEVICE": "no-such-xyz"}).startswith("OCLF_DEVICE=no-such-xyz matches no")
    assert _device_error({"OCL_DEVICE": "no-such-xyz"}).startswith("OCL_DEVICE=no-such-xyz matches no")
    assert _device_error({"OCLF_DEVICE": "0:0", "OCL_DEVICE": "no-such-xyz"}) == "opened"


def _source_files():
    for name in SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for f in files:
            if f.suffix in (".py", ".cpp", ".hpp", ".sh", "") and "__pycache__" not in f.parts:
                yield f


def test_every_oclf_name_in_the_sources_is_a_setting():
    known = {s.variable for s in settings.SETTINGS.values()}
    for path in _source_files():
        for name in set(re.findall(r"\bOCLF_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace"))):
            assert name in known, f"{path.relative_to(ROOT)} uses {name}, which opencl_functions/settings.py does not list"


def test_readme_table_is_the_settings_table():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Settings"):]
    listed = re.findall(r"^\| `(OCLF_[A-Z_]+)`", section, re.M)
    assert listed == [s.variable for s in settings.SETTINGS.values()]
    for s in settings.SETTINGS.values():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{s.variable}`"))
        assert s.meaning in row and s.default in row and all(f"`{a}`" in row for a in s.aliases)


def test_the_runtime_knows_the_tables_aliases():
    """runtime/settings.cpp's older names are the table's aliases, for every setting the C++ side
    may read (the grader's are read in Python alone)."""
    text = (ROOT / "opencl_functions" / "runtime" / "settings.cpp").read_text()
    runtime = set(re.findall(r'\{"([A-Z_]+)", "([A-Z_]+)"\}', text))
    assert runtime, "no aliases found in runtime/settings.cpp"
    for s in settings.SETTINGS.values():
        if not s.reader.startswith("grading"):
            assert {alias for name, alias in runtime if name == s.name} == set(s.aliases), s.name


@pytest.mark.parametrize("name", sorted(settings.SETTINGS))
def test_every_setting_is_documented(name):
    s = settings.SETTINGS[name]
    assert s.meaning and s.default and s.reader
