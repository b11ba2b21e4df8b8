"""Whole gradings (grading.grade) and the Gradescope package: the handout done as asked
(the tiled kernel) through run_autograder on a fake /autograder layout gets full
correctness and a share of the performance points near the tiled rung's, the reference
(built with its staff-only files, --staff-files) gets full marks, the untouched handout
gets nothing for correctness, a student's build has no staff kernel in reach, and each
hostile submission of grading/hostile/ gets the outcome its fixture expects, with
results.json written every time and no process of the sandbox account left behind. The
slow ones are opt-in."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grading import fixtures, sandbox
from grading.build import PUBLIC_CACHE
from grading.autograder import make_zip
from grading.compare import read_result
from grading.handout import ROOT, is_staff_only, make_handout

# Run alone, after the parallel part of make test: whole gradings (the sandbox account's
# processes, timed runs compared).
pytestmark = pytest.mark.serial

# Each hostile fixture with a `step` runs through that step in test_exploits.py; these
# goes through a whole grading by default too.
DEFAULT_HOSTILE = ["racy_kernel"]
SLOW_HOSTILE = sorted(set(fixtures.hostile()) - set(DEFAULT_HOSTILE))
STUDENT_FILES = ("opencl-functions.cpp", "conv2d.cl")
# Timed runs are alternated and the fastest kept; between identical code the share still
# moves a little with the machine's noise.
SHARE_SLACK = 0.1


def staff_kernel_names() -> set:
    """Kernels a student must not find anywhere in their sandbox: those of the reference's
    staff-only files and staff regions, and the ladder's (but its public naive baseline)."""
    # The staff-only kernel files of the library (opencl_functions/reference/; the opencl
    # device's own kernels, in torch_opencl/, never run in a grading).
    files = [p for p in sorted((ROOT / "opencl_functions").rglob("*.cl")) if is_staff_only(p.relative_to(ROOT).as_posix())]
    files += [p for p in (ROOT / "grading" / "kernels").glob("*.cl") if p.name != "conv2d_naive.cl"]
    names = set()
    for p in files:
        names |= set(re.findall(r"kernel\b[^;{(]*?\bvoid\s+(\w+)\s*\(", p.read_text()))
    conv2d_cl = (ROOT / "opencl_functions" / "conv2d.cl").read_text()
    for region in re.findall(r"BEGIN STAFF(.*?)END STAFF", conv2d_cl, re.S):
        names |= set(re.findall(r"kernel\b[^;{(]*?\bvoid\s+(\w+)\s*\(", region))
    return names


def test_the_students_kernel_cache_holds_no_staff_kernel(ref_cache):
    # PoCL keeps each program's bitcode and a folder per kernel: the cache a submission
    # starts from is warmed by the public naive rung, never by the reference or the ladder.
    staff = staff_kernel_names()
    staff.add("conv2d_tiled")  # the handout's kernel: compiled from the solution it would be an answer
    assert {"conv2d_cpu", "conv2d_blocked", "gemm_rows", "winograd_input"} <= staff
    public = next(ref_cache.glob(f"*/{PUBLIC_CACHE}"))
    found = {p.name for p in public.rglob("*")}
    assert "conv2d_naive" in found and any(name.startswith("Xgemm") for name in found), sorted(found)[:20]
    assert not staff & found, sorted(staff & found)
    # In the bitcode, names too generic to be ours alone (transpose, say) could come from CLBlast.
    programs = b"".join(p.read_bytes() for p in public.rglob("program.bc"))
    distinctive = [name for name in staff if "_" in name and len(name) >= 9]
    assert not [name for name in distinctive if name.encode() in programs]


def grade(submission: Path, results: Path, ref_cache: Path, *flags: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "grading.grade", "--submission", str(submission), "--results", str(results),
         "--ref-cache", str(ref_cache), "--perf-runs", "5", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert results.is_file(), "results.json must always be written"
    if os.geteuid() == 0:
        assert sandbox.processes_of(sandbox.sandbox_user().pw_uid) == [], "a process of the sandbox user was left"
    return json.loads(results.read_text())


def by_name(results: dict) -> dict:
    return {t["name"]: t for t in results["tests"]}


def perf_test(results: dict) -> dict:
    return next(t for t in results["tests"] if t["name"].startswith("Performance"))


def check_gradescope_format(results: dict) -> None:
    assert set(results) >= {"score", "execution_time", "output", "tests", "leaderboard"}
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert 0 <= test["score"] <= test["max_score"]
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=0.01)


def check_expected(results: dict, fixture: fixtures.Fixture) -> None:
    """The fixture's [expected]: the score without the performance test; the tests that
    pass (name prefixes; every other one fails); the performance points ("none", "some",
    or "at_most_base": no more than the honest submission it is built on); text in a
    test's output; text absent from the whole results."""
    expected = fixture.expected
    check_gradescope_format(results)
    tests = by_name(results)
    perf = perf_test(results)
    assert results["score"] - perf["score"] == pytest.approx(expected["score"]), results["output"]
    share = perf["score"] / perf["max_score"]
    if expected["perf"] == "none":
        assert share == 0, perf["output"]
    elif expected["perf"] == "some":
        assert share > 0, perf["output"]
    else:
        assert share <= fixtures.base_share(fixture) + SHARE_SLACK, perf["output"]
    for name, test in tests.items():
        if name.startswith(("Build", "Performance")):
            continue
        should_pass = any(name.startswith(prefix) for prefix in expected["passed"])
        assert (test["status"] == "passed") == should_pass, f"{name}: {test['output']}"
    build = next(t for name, t in tests.items() if name.startswith("Build"))
    assert (build["status"] == "failed") == bool(expected.get("build_failed")), build["output"]
    if "build_output" in expected:
        assert expected["build_output"] in build["output"], build["output"]
    for prefix, text in expected.get("output", {}).items():
        test = next(t for name, t in tests.items() if name.startswith(prefix))
        assert text in test["output"], test["output"]
    if "absent" in expected:
        assert expected["absent"] not in json.dumps(results)


def _hash_tree(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and "pocl-cache" not in p.parts:
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


def _grade_fixture(fixture: fixtures.Fixture, tmp_path: Path, ref_cache: Path) -> dict:
    before = _hash_tree(ref_cache)
    # A short step timeout for the submissions that hang; honest steps take ~15 s unloaded.
    timeout = "45" if fixture.name == "kernel_loop" else "120"
    results = grade(fixture.write(tmp_path / "submission"), tmp_path / "results" / "results.json", ref_cache,
                    "--timeout", timeout)
    check_expected(results, fixture)
    assert _hash_tree(ref_cache) == before, "the reference build changed"
    assert len(json.dumps(results)) < 500_000
    return results


# ---------------------------------------------------------------------------------------
# Whole gradings

def test_run_autograder_grades_the_handout_done_as_asked(tmp_path, ref_cache, ocl):
    """The Gradescope package on a fake /autograder (source/ from the zip, submission/ in,
    results/results.json out) with the tiled kernel and its host code, as the handout asks:
    full correctness and a share of the performance points near the tiled rung's."""
    root = tmp_path / "autograder"
    zip_path = tmp_path / "autograder.zip"
    names = make_zip(zip_path)
    assert "setup.sh" in names and "run_autograder" in names
    assert not any(n.startswith(("grading/hostile/", "tests/")) for n in names)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    tiled = next(r for r in fixtures.ladder() if r.name == "tiled")
    tiled.write(root / "submission")
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), OCLF_GRADER_VENV=str(ROOT / ".venv"),
               OCLF_GRADER_REF_CACHE=str(ref_cache))
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    results = json.loads((root / "results" / "results.json").read_text())
    check_gradescope_format(results)
    perf = perf_test(results)
    assert results["score"] - perf["score"] == 70, results["output"]
    share = perf["score"] / perf["max_score"]
    assert 0 < share < 1 and abs(share - tiled.share) <= SHARE_SLACK, perf["output"]
    assert {e["name"] for e in results["leaderboard"]} >= {"Speed vs reference (×)"}


@pytest.mark.slow
def test_reference_gets_full_marks(tmp_path, ref_cache, ocl):
    """The reference, whose fast paths live in staff-only files (--staff-files builds it
    with them; a student's build never has them). Slow: about 3.5 minutes on 2 cores, its
    per-shape kernels compiled for every hidden shape and run under Oclgrind."""
    submission = tmp_path / "submission"
    submission.mkdir()
    for name in STUDENT_FILES:
        shutil.copy(ROOT / "opencl_functions" / name, submission / name)
    results = grade(submission, tmp_path / "results.json", ref_cache, "--staff-files")
    check_gradescope_format(results)
    assert results["score"] >= 100 - 30 * SHARE_SLACK, results["output"]
    assert all(t["status"] == "passed" for t in results["tests"] if not t["name"].startswith("Performance"))


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
    assert next(t for n, t in tests.items() if n.startswith("Build"))["status"] == "passed"
    assert all(t["status"] == "failed" for name, t in tests.items() if not name.startswith("Build"))
    assert "never written" in next(t for n, t in tests.items() if n.startswith("tests.py: conv2d"))["output"]


def test_missing_file_still_writes_results(tmp_path, ref_cache):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "conv2d.cl").write_text("")
    results = grade(tmp_path / "submission", tmp_path / "results.json", ref_cache)
    assert results["score"] == 0
    build = next(t for t in results["tests"] if t["name"].startswith("Build"))
    assert "lacks opencl-functions.cpp" in build["output"]


@pytest.mark.parametrize("name", DEFAULT_HOSTILE)
def test_hostile_submission(name, tmp_path, ref_cache, ocl):
    _grade_fixture(fixtures.hostile()[name], tmp_path, ref_cache)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_HOSTILE)
def test_hostile_submission_slow(name, tmp_path, ref_cache, ocl):
    _grade_fixture(fixtures.hostile()[name], tmp_path, ref_cache)


def test_read_result_refuses_links_and_big_files(tmp_path):
    (tmp_path / "target").write_bytes(b"x" * 100)
    (tmp_path / "link.pt").symlink_to(tmp_path / "target")
    assert "unreadable" in read_result(tmp_path / "link.pt", 1000)["error"]
    assert "more than" in read_result(tmp_path / "target", 10)["error"]
    assert "no result" in read_result(tmp_path / "missing.pt", 10)["error"]


def test_the_grader_turns_the_program_cache_off_for_its_children(tmp_path):
    """No program binary kept by an earlier process (a file a submission could write) is loaded
    by a grading's children (tests/test_program_cache.py has the cache itself)."""
    from grading.workspace import Workspace

    ws = Workspace.__new__(Workspace)
    ws.python, ws.extra_path = sys.executable, []
    env = ws.env(tmp_path, tmp_path / "home", tmp_path / "pocl")
    assert env["OCLF_PROGRAM_CACHE"] == "0"
