"""The grader (grading.grade, grading.sandbox) and the Gradescope package: the reference
gets full marks through run_autograder on a fake /autograder layout, the untouched handout
gets nothing for correctness, and each submission of grading/hostile/ gets the score in
its expected.json, with results.json written every time. The slow ones are opt-in."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grading import sandbox
from grading.autograder import make_zip
from grading.grade import read_result
from grading.handout import ROOT, make_handout

HOSTILE = ROOT / "grading" / "hostile"
DEFAULT_HOSTILE = ["compile_error", "segfault", "kernel_loop"]
SLOW_HOSTILE = sorted(p.name for p in HOSTILE.iterdir() if p.is_dir() and p.name not in DEFAULT_HOSTILE)
STUDENT_FILES = ("opencl-functions.cpp", "conv2d.cl")


@pytest.fixture(scope="session")
def ref_cache(tmp_path_factory):
    """One reference build and warm kernel cache for every grading in the session, made as
    Gradescope's setup.sh makes it (--prepare-only)."""
    cache = tmp_path_factory.mktemp("ref-cache")
    proc = subprocess.run([sys.executable, "-m", "grading.grade", "--prepare-only", "--ref-cache", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert list(cache.glob("*/opencl_functions/_core*.so"))
    return cache


def grade(submission: Path, results: Path, ref_cache: Path, *flags: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "grading.grade", "--submission", str(submission), "--results", str(results),
         "--ref-cache", str(ref_cache), "--perf-runs", "3", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert results.is_file(), "results.json must always be written"
    return json.loads(results.read_text())


def by_name(results: dict) -> dict:
    return {t["name"]: t for t in results["tests"]}


def check_gradescope_format(results: dict) -> None:
    assert set(results) >= {"score", "execution_time", "output", "tests", "leaderboard"}
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert 0 <= test["score"] <= test["max_score"]
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=0.01)


def check_expected(results: dict, expected: dict) -> None:
    """expected.json: the score without the performance test, the tests that must pass
    (name prefixes; every other one fails), and "perf": "none" or "some" points."""
    check_gradescope_format(results)
    tests = by_name(results)
    perf = next(t for name, t in tests.items() if name.startswith("Performance"))
    assert results["score"] - perf["score"] == pytest.approx(expected["score"]), results["output"]
    assert (perf["score"] > 0) == (expected["perf"] == "some"), perf["output"]
    for name, test in tests.items():
        if name.startswith(("Build", "Performance")):
            continue
        should_pass = any(name.startswith(prefix) for prefix in expected["passed"])
        assert (test["status"] == "passed") == should_pass, f"{name}: {test['output']}"


# ---------------------------------------------------------------------------------------
# The sandbox itself (fast)

def _env():
    return {"PATH": "/usr/bin:/bin"}


def test_sandbox_caps_output_and_stops_at_timeout(tmp_path):
    result = sandbox.run(["sh", "-c", "head -c 5000000 /dev/zero; sleep 30"], tmp_path, _env(),
                         sandbox.Limits(timeout_s=2), sandbox.sandbox_user())
    assert result.timed_out and result.returncode is None
    assert result.output_bytes == 5_000_000 and len(result.output) <= sandbox.OUTPUT_KEEP
    assert "timed out" in result.describe()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_sandbox_runs_as_another_user_without_access_to_grader_files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("reference data")
    secret.chmod(0o600)
    user = sandbox.sandbox_user()
    result = sandbox.run(["sh", "-c", f"id -u; cat {secret}"], "/", _env(), sandbox.Limits(timeout_s=10), user)
    assert result.output.split()[0] == str(user.pw_uid)
    assert "reference data" not in result.output and "Permission denied" in result.output


def test_sandbox_limits_processes(tmp_path):
    # A fork bomb in shell: the process limit stops it, the timeout ends it, nothing is left.
    result = sandbox.run(["sh", "-c", "b() { b & b & }; b; sleep 1; echo done"], tmp_path, _env(),
                         sandbox.Limits(timeout_s=5, nproc=50), sandbox.sandbox_user())
    assert result.wall_s < 10
    assert "fork" in result.output.lower() or "resource" in result.output.lower()


def test_read_result_refuses_links_and_big_files(tmp_path):
    (tmp_path / "target").write_bytes(b"x" * 100)
    (tmp_path / "link.pt").symlink_to(tmp_path / "target")
    assert "unreadable" in read_result(tmp_path / "link.pt", 1000)["error"]
    assert "more than" in read_result(tmp_path / "target", 10)["error"]
    assert "no result" in read_result(tmp_path / "missing.pt", 10)["error"]


# ---------------------------------------------------------------------------------------
# Whole gradings

def test_run_autograder_gives_reference_full_marks(tmp_path, ref_cache, ocl):
    """The Gradescope package on a fake /autograder: source/ from the zip, submission/ in,
    results/results.json out."""
    root = tmp_path / "autograder"
    zip_path = tmp_path / "autograder.zip"
    names = make_zip(zip_path)
    assert "setup.sh" in names and "run_autograder" in names
    assert not any(n.startswith(("grading/hostile/", "tests/")) for n in names)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    for name in STUDENT_FILES:
        shutil.copy(ROOT / "opencl_functions" / name, root / "submission" / name)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), GRADER_VENV=str(ROOT / ".venv"), GRADER_REF_CACHE=str(ref_cache))
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    results = json.loads((root / "results" / "results.json").read_text())
    check_gradescope_format(results)
    assert results["score"] == 100, results["output"]
    assert all(t["status"] == "passed" for t in results["tests"])
    assert {e["name"] for e in results["leaderboard"]} >= {"Speed vs reference (×)"}


def test_untouched_handout_gets_no_correctness_points(tmp_path, ref_cache, ocl):
    handout = tmp_path / "handout"
    make_handout(handout)
    submission = tmp_path / "submission"
    submission.mkdir()
    for name in STUDENT_FILES:
        shutil.copy(handout / "opencl_functions" / name, submission / name)
    results = grade(submission, tmp_path / "results.json", ref_cache)
    check_gradescope_format(results)
    assert results["score"] == 0
    tests = by_name(results)
    assert tests["Build: compile opencl-functions.cpp"]["status"] == "passed"
    assert all(t["status"] == "failed" for name, t in tests.items() if not name.startswith("Build"))
    assert "differ from torch" in tests["tests.py: 39 conv2d cases"]["output"]


def test_missing_file_still_writes_results(tmp_path, ref_cache):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "conv2d.cl").write_text("")
    results = grade(tmp_path / "submission", tmp_path / "results.json", ref_cache)
    assert results["score"] == 0
    assert "lacks opencl-functions.cpp" in by_name(results)["Build: compile opencl-functions.cpp"]["output"]


def _hash_tree(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and "pocl-cache" not in p.parts:
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def _hostile_submission(name: str, tmp_path: Path) -> Path:
    """A folder of grading/hostile/ holds the student files that submission changes; the
    others are the reference's own."""
    submission = tmp_path / "submission"
    submission.mkdir()
    for file in STUDENT_FILES:
        own = HOSTILE / name / file
        shutil.copy(own if own.exists() else ROOT / "opencl_functions" / file, submission / file)
    return submission


def _grade_hostile(name: str, tmp_path: Path, ref_cache: Path) -> dict:
    expected = json.loads((HOSTILE / name / "expected.json").read_text())
    before = _hash_tree(ref_cache)
    # A short step timeout for the submissions that hang; honest steps take ~15 s unloaded.
    timeout = "45" if name in ("kernel_loop", "fork_bomb") else "120"
    results = grade(_hostile_submission(name, tmp_path), tmp_path / "results" / "results.json", ref_cache,
                    "--timeout", timeout)
    check_expected(results, expected)
    if expected.get("build_failed"):
        assert by_name(results)["Build: compile opencl-functions.cpp"]["status"] == "failed"
    assert _hash_tree(ref_cache) == before, "the reference build changed"
    assert len(json.dumps(results)) < 500_000
    return results


@pytest.mark.parametrize("name", DEFAULT_HOSTILE)
def test_hostile_submission(name, tmp_path, ref_cache, ocl):
    results = _grade_hostile(name, tmp_path, ref_cache)
    conv = by_name(results)["conv2d on 8 new random shapes"]["output"] if name != "compile_error" else ""
    if name == "compile_error":
        assert "undeclared_helper" in by_name(results)["Build: compile opencl-functions.cpp"]["output"]
    elif name == "segfault":
        assert "SIGSEGV" in conv
    elif name == "kernel_loop":
        assert "timed out" in conv


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_HOSTILE)
def test_hostile_submission_slow(name, tmp_path, ref_cache, ocl):
    results = _grade_hostile(name, tmp_path, ref_cache)
    if name == "own_results":
        assert "hacked" not in json.dumps(results)
