"""The grader's sandbox (grading.sandbox) and the allowed-calls check (grading.symbols):
output capped, timeouts kept, another account, process limits, no process outliving its
step, and the symbols a student's object may leave undefined."""
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from grading import account, process, sandbox, symbols
from grading.build import COMPILE, DEPENDENCIES, OBJECT
from grading.fixtures import ROOT, base_files, hostile, ladder
from grading.handout import is_staff_only

# Run alone, after the parallel part of make test: the sandbox account's processes are counted,
# timeouts enforced.
pytestmark = pytest.mark.serial

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def _env():
    return {"PATH": "/usr/bin:/bin"}


def test_sandbox_caps_output_and_stops_at_timeout(tmp_path):
    result = sandbox.run(["sh", "-c", "head -c 5000000 /dev/zero; sleep 30"], tmp_path, _env(),
                         sandbox.Limits(timeout_s=2), sandbox.sandbox_user())
    assert result.timed_out and result.returncode is None
    assert result.output_bytes == 5_000_000 and len(result.output) <= sandbox.OUTPUT_KEEP
    assert "timed out" in result.describe()


@ROOT_ONLY
def test_sandbox_runs_as_its_own_account_without_access_to_grader_files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("reference data")
    secret.chmod(0o600)
    user = sandbox.sandbox_user()
    assert user.pw_name == sandbox.SANDBOX_USER
    result = sandbox.run(["sh", "-c", f"id -u; cat {secret}"], "/", _env(), sandbox.Limits(timeout_s=10), user)
    assert result.output.split()[0] == str(user.pw_uid)
    assert "reference data" not in result.output and "Permission denied" in result.output


@ROOT_ONLY
def test_sandbox_refuses_nobody(monkeypatch):
    monkeypatch.setenv("OCLF_GRADER_USER", "nobody")
    with pytest.raises(sandbox.SandboxError, match="other services share"):
        sandbox.sandbox_user()


def test_sandbox_limits_processes(tmp_path):
    # A fork bomb in shell: the process limit stops it, the timeout ends it, nothing is left.
    result = sandbox.run(["sh", "-c", "b() { b & b & }; b; sleep 1; echo done"], tmp_path, _env(),
                         sandbox.Limits(timeout_s=5, nproc=50), sandbox.sandbox_user())
    assert result.wall_s < 10
    assert "fork" in result.output.lower() or "resource" in result.output.lower()


@ROOT_ONLY
def test_no_process_outlives_its_step(tmp_path):
    """A child that leaves the step's session (setsid) and hides in the background is gone
    when the step ends, and the step ended on time."""
    user = sandbox.sandbox_user()
    start = time.monotonic()
    result = sandbox.run(["sh", "-c", "setsid sh -c 'while :; do :; done' & sleep 0.3; echo spawned"], tmp_path,
                         _env(), sandbox.Limits(timeout_s=20), user)
    assert "spawned" in result.output and time.monotonic() - start < 10
    assert sandbox.processes_of(user.pw_uid) == [], sandbox.containment()


@ROOT_ONLY
@pytest.mark.parametrize("hidden", [True, False])
def test_no_file_in_the_shared_folders_outlives_its_step(hidden, tmp_path):
    """A step that stashes files in /dev/shm and /run/lock (world-writable on the machine)
    leaves nothing for the next step: with namespaces each is an empty tmpfs of the step's
    own, and without them the sandbox user's files there are removed after the step."""
    if hidden and not sandbox.namespaces():
        pytest.skip("no namespaces here")
    view = sandbox.View(private=[f for f in sandbox.SHARED_FOLDERS if os.path.isdir(f)]) if hidden else sandbox.View()
    user = sandbox.sandbox_user()
    stash = " ".join(f"{folder}/oclf-stash" for folder in sandbox.SHARED_FOLDERS)
    first = sandbox.run(["sh", "-c", f"for f in {stash}; do echo seen > $f && mkdir $f.d && cat $f; done; true"],
                        "/", _env(), sandbox.Limits(timeout_s=20), user, view=view)
    assert first.output.count("seen") == len(sandbox.SHARED_FOLDERS), first.output  # it could write there
    for folder in sandbox.SHARED_FOLDERS:
        assert not os.path.lexists(f"{folder}/oclf-stash") and not os.path.lexists(f"{folder}/oclf-stash.d")
    second = sandbox.run(["sh", "-c", f"cat {stash} 2>&1; true"], "/", _env(), sandbox.Limits(timeout_s=20), user,
                         view=view)
    assert "seen" not in second.output, second.output


@ROOT_ONLY
def test_sandbox_refuses_to_start_while_its_user_owns_processes(tmp_path):
    user = sandbox.sandbox_user()
    squatter = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                                 "sleep", "30"])
    try:
        time.sleep(0.2)
        with pytest.raises(sandbox.SandboxError, match="owns processes"):
            sandbox.run(["true"], tmp_path, _env(), sandbox.Limits(timeout_s=5), user)
    finally:
        squatter.kill()
        squatter.wait()


def test_a_steps_lock_is_held_until_its_descriptor_closes():
    """take_lock hands back the descriptor that holds the machine-wide lock, and the lock is
    free once it closes (a lost descriptor held it for as long as the grader ran: its next
    sandboxed step waited on itself, and every other grading on the machine on it)."""
    uid = 2**31 - 7  # no account's: a lock file of this test's own
    path = f"/tmp/oclf-sandbox-{uid}.lock"
    held = account.take_lock(uid)
    other = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(held)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
        os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_make_checks_runner_ends_what_its_child_leaves(tmp_path):
    """grading.process as make check starts its children (this user, no account): output
    capped, the timeout kept, and a process left in the background of the step's session
    gone with it."""
    result = process.run(["sh", "-c", "sleep 60 & echo $!; head -c 100000 /dev/zero; sleep 30"], tmp_path, _env(),
                         process.Limits(timeout_s=2))
    assert result.timed_out and result.returncode is None and result.wall_s < 10
    assert result.output_bytes > process.OUTPUT_KEEP >= len(result.output.encode())
    assert not _alive(int(result.output.split()[0]))


# ---------------------------------------------------------------------------------------
# The allowed-calls check

@pytest.mark.parametrize("symbol, rule", [
    ("PyGILState_Ensure", "Python"),
    ("pybind11::module_::import(char const*)", "Python"),
    ("dlopen", "loads code"),
    ("fork", "processes"),
    ("setsid", "processes"),
    ("execve", "processes"),
    ("pthread_create", "threads"),
    ("std::thread::_M_start_thread(std::unique_ptr<std::thread::_State>, void (*)())", "threads"),
    ("socket", "network"),
    ("syscall", "system"),
    ("clblast::StatusCode clblast::Convgemm<float>(clblast::KernelMode, unsigned long)", "Convgemm"),
    ("oclf::conv2d_backward_input(oclf::Conv2dArgs const&)", "outside the course runtime"),
    ("oclf::launch_log::set_capture(bool)", "outside the course runtime"),
    ("clEnqueueNDRangeKernel", "around the course runtime"),
    ("clCreateProgramWithSource", "around the course runtime"),
    ("clSetKernelArg", "around the course runtime"),
    ("clGetExtensionFunctionAddressForPlatform", "around the course runtime"),
    ("mmap", "not on the list"),
])
def test_refused_symbols_name_their_rule(symbol, rule):
    reason = symbols.judge(symbol)
    assert reason is not None and rule in reason.replace("touches processes, signals", "system")


@pytest.mark.parametrize("symbol", [
    "clCreateBuffer", "clEnqueueReadBuffer", "clGetDeviceInfo", "clFinish",
    "clblast::StatusCode clblast::Gemm<float>(clblast::Layout, clblast::Transpose)",
    "oclf::Runtime::get()", "vtable for oclf::Error", "oclf::Buffer::input(void const*, unsigned long)",
    "oclf::setting(char const*)", "oclf::set_arg(_cl_kernel*, unsigned int, unsigned long, void const*)", "std::runtime_error::what() const", "operator new(unsigned long)",
    "__cxa_throw", "memcpy", "__printf_chk", "fprintf", "fopen", "getenv", "clock_gettime", "__isoc99_sscanf",
    "std::chrono::_V2::steady_clock::now()", "sqrtf", "_Unwind_Resume",
])
def test_allowed_symbols(symbol):
    assert symbols.judge(symbol) is None


def _compile(source: str, tmp_path, must_compile: bool = True, clean: bool = True, staff: bool = False):
    """The refusals for a student file compiled as the grader compiles it (None when it does
    not compile and must_compile is False); `clean`: without a warning; `staff`: with the
    staff-only headers (the reference's own build)."""
    tree = tmp_path / "tree"
    # As the grader builds a student's program: no staff-only file (the reference's fast
    # paths), unless staff (the reference itself).
    def ignore(folder, names):
        rel = Path(folder).relative_to(ROOT)
        return [n for n in names if n.endswith((".so", ".cl", ".py", ".json"))
                or (not staff and is_staff_only((rel / n).as_posix()))]

    shutil.copytree(ROOT / "opencl_functions", tree / "opencl_functions", ignore=ignore)
    (tree / "opencl_functions" / "opencl-functions.cpp").write_text(source)
    (tree / OBJECT).parent.mkdir(parents=True)
    proc = subprocess.run(COMPILE, cwd=tree, capture_output=True, text=True, timeout=300)
    if not must_compile and proc.returncode:
        return None
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not clean or "warning" not in proc.stderr, proc.stderr[-3000:]
    return symbols.check_object(tree / OBJECT) + symbols.header_refusals(tree / DEPENDENCIES)


def test_reference_and_every_ladder_rung_pass_the_check(tmp_path):
    assert _compile(base_files("reference")["opencl-functions.cpp"], tmp_path / "reference", staff=True) == []
    for rung in ladder():
        rung_source = rung.files()["opencl-functions.cpp"]
        assert _compile(rung_source, tmp_path / "rungs" / rung.name, staff=True) == [], rung.name


def test_printing_timing_and_reading_files_stay_allowed(tmp_path):
    source = base_files("solution")["opencl-functions.cpp"].replace("#include <string>\n", """#include <string>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
""").replace(
        "void conv2d(const Conv2dArgs& p) {\n  Runtime& rt = Runtime::get();\n", """void conv2d(const Conv2dArgs& p) {
  Runtime& rt = Runtime::get();
  const auto t0 = std::chrono::steady_clock::now();
  std::ifstream kernel_file("opencl_functions/conv2d.cl");
  std::stringstream text;
  text << kernel_file.rdbuf();
  std::cout << "kernel source: " << text.str().size() << " bytes, "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s" << std::endl;
  std::printf("conv2d %d x %d\\n", p.h, p.w);
""")
    assert _compile(source, tmp_path) == []


@pytest.mark.parametrize("name", ["dlopen", "clock_patch", "fork_bomb", "partial_events", "icd_dispatch"])
def test_hostile_calls_are_refused_by_name(name, tmp_path):
    fixture = hostile()[name]
    refusals = _compile(fixture.files()["opencl-functions.cpp"], tmp_path)
    assert any(fixture.expected["build_output"] in str(r) for r in refusals), refusals


@pytest.mark.parametrize("name", sorted(hostile()))
def test_hostile_fixture_builds_as_it_expects(name, tmp_path):
    """Each hostile submission compiles cleanly and passes the allowed-calls check, unless its
    fixture expects the build to fail; then the compiler or the check stops it."""
    fixture = hostile()[name]
    refusals = _compile(fixture.files()["opencl-functions.cpp"], tmp_path, must_compile=False, clean=False)
    if fixture.expected.get("build_failed"):
        assert refusals is None or refusals, name
    else:
        assert refusals == [], refusals
