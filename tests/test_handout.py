"""The handout generator (grading.handout): solution regions become their prompt or a
TODO, staff regions vanish, markers never reach the handout, bad markers are errors naming
file:line; the handout holds no staff text, no reference kernel, no torch device and no
staff setting, every import in it finds its module there, every command its assignment
document names exists, the generated tree builds, runs and fails tests.py visibly, and,
done as asked, passes its own make test and make check."""
import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grading.handout import ROOT, make_handout
from grading.library import settings
from grading.regions import MARKER, MarkerError, strip_regions

B, E = "BEGIN", "END"  # spelled apart so this file holds no marker lines itself


def cpp(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def test_prompt_replaces_solution():
    text = cpp("int f() {", f"  // {B} SOLUTION", "  return 42;", f"  // {E} SOLUTION",
               f"  // {B} PROMPT", "  // TODO: return the answer", "  return 0;", f"  // {E} PROMPT", "}")
    assert strip_regions(text, "f.cpp", "//") == cpp("int f() {", "  // TODO: return the answer", "  return 0;", "}")


def test_region_without_prompt_becomes_todo():
    text = cpp("def f():", f"    # {B} SOLUTION", "    return 42", f"    # {E} SOLUTION", "", "x = 1")
    assert strip_regions(text, "f.py", "#") == cpp("def f():", "    # TODO: write this part.", "", "x = 1")


@pytest.mark.parametrize(
    "lines, message",
    [
        ([f"// {B} SOLUTION", "x;"], "f.cpp:1: BEGIN SOLUTION is never closed"),
        (["x;", f"// {E} SOLUTION"], "f.cpp:2: END SOLUTION without an open"),
        ([f"// {B} SOLUTION", f"// {B} SOLUTION", f"// {E} SOLUTION"], "f.cpp:2: BEGIN SOLUTION inside the SOLUTION"),
        ([f"// {B} PROMPT", f"// {E} PROMPT"], "f.cpp:1: BEGIN PROMPT without an open BEGIN SOLUTION"),
        ([f"// {B} SOLUTION", f"// {E} SOLUTION", f"// {B} PROMPT"], "f.cpp:3: BEGIN PROMPT is never closed"),
        ([f"# {B} SOLUTION", f"# {E} SOLUTION"], "f.cpp:1: marker uses '#'"),
        (["x;", f"y;  // {B} SOLUTION", f"// {E} SOLUTION"], "f.cpp:2: a marker must stand alone"),
    ],
)
def test_bad_markers_name_file_and_line(lines, message):
    with pytest.raises(MarkerError, match=message):
        strip_regions(cpp(*lines), "f.cpp", "//")


def test_bad_marker_stops_the_handout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.cl").write_text(cpp(f"// {B} SOLUTION", "x;", f"// {E} SOLUTION"))
    (src / "bad.py").write_text(cpp("a = 1", f"# {E} SOLUTION"))
    with pytest.raises(MarkerError, match="bad.py:2"):
        make_handout(tmp_path / "out", root=src, files=["good.cl", "bad.py"])
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "handout"
    make_handout(out)
    return out


def test_handout_has_no_markers_and_no_staff_files(handout):
    files = [p for p in handout.rglob("*") if p.is_file()]
    assert files
    for path in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            assert not MARKER.match(line), f"{path}:{n}"
    for staff in ("STAFF.md", "opencl_functions/reference", "torch_opencl", "grading/hostile",
                  "grading/ladder", "grading/grade.py", "grading/kernels/conv2d_blocked.cl", "tests/test_grading.py",
                  "tests/test_fixtures.py"):
        assert not (handout / staff).exists(), staff
    host = (handout / "opencl_functions" / "opencl-functions.cpp").read_text()
    assert "clblast::Gemm(" not in host and "TODO" in host
    assert "barrier(" not in (handout / "opencl_functions" / "conv2d.cl").read_text()


def test_handout_builds_runs_and_fails_visibly(handout, ocl):
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=handout,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests.py"], cwd=handout,
                         capture_output=True, text=True, timeout=600)
    # Exit status 1: tests ran and failed (not an error in collection, not a crash).
    assert run.returncode == 1, run.stdout + run.stderr
    # Every case that computes something fails; only empty inputs (nothing to compute) pass.
    passed = re.search(r"(\d+) passed", run.stdout)
    assert re.search(r"\d+ failed", run.stdout), run.stdout
    assert passed is None or int(passed.group(1)) <= 7, run.stdout
    assert str(ROOT) not in run.stdout  # it imported its own build, not the reference's


def test_dockerfile_runs_the_tested_recipe(handout):
    """The image is not built here; its steps must stay the ones the tests run on a tree:
    scripts/setup.sh, make build, make run (and the handout's Makefile must have them)."""
    docker = (ROOT / "Dockerfile").read_text()
    assert "RUN bash scripts/setup.sh && make build" in docker
    assert 'CMD ["make", "run"]' in docker
    assert "/etc/OpenCL/vendors/nvidia.icd" in docker
    dry = subprocess.run(["make", "-n", "build", "run"], cwd=handout, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "build_ext --inplace" in dry.stdout and "pytest tests.py" in dry.stdout


# Names of the reference's own kernels and of staff material: none may reach the handout.
STAFF_WORDS = ("conv2d_cpu", "conv2d_gpu", "conv2d_depthwise", "conv2d_pack_weights", "conv2d_blocked", "split-K",
               "gemm_rows", "gemm_cols", "matmul_fast", "conv2d_fast", "hostile", "STAFF", "TODO: write this part")


def test_handout_holds_no_staff_text_and_no_orphan_todo(handout):
    for path in handout.rglob("*"):
        if path.is_file() and path.suffix in (".md", ".py", ".cpp", ".hpp", ".cl", ".txt", ".toml", "") :
            text = path.read_text(errors="replace")
            for word in STAFF_WORDS:
                assert word not in text, f"{path.relative_to(handout)} mentions {word!r}"


def test_every_student_todo_says_what_to_write(handout):
    for name in ("opencl_functions/opencl-functions.cpp", "opencl_functions/conv2d.cl"):
        todos = [line for line in (handout / name).read_text().splitlines() if "TODO" in line]
        assert todos and all(len(line.split("TODO:", 1)[1].split()) >= 5 for line in todos), todos


def test_assignment_comes_first_and_its_commands_exist(handout):
    readme = (handout / "README.md").read_text()
    assert "ASSIGNMENT.md" in "\n".join(readme.splitlines()[:12])
    assignment = (handout / "ASSIGNMENT.md").read_text()
    targets = set(re.findall(r"`make ([a-z][\w-]*)", assignment)) | set(re.findall(r"^make ([a-z][\w-]*)", assignment,
                                                                                     re.M))
    assert {"run", "check", "gpt", "sanity", "resnet", "bird"} <= targets
    makefile = (handout / "Makefile").read_text()
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target} is not in the handout's Makefile"
    for module in re.findall(r"python -m ([\w.]+)", assignment):
        assert (handout / (module.replace(".", "/") + ".py")).is_file(), module


def test_handout_documents_and_help_speak_to_students(handout):
    """Its documents and `make help` name no staff file, tool or target, and every module
    or file they point to is in the handout."""
    from grading.handout import STAFF_ONLY

    # Staff files by name (by path where a handout file has the name too), staff folders by
    # path ("reference" alone is a word of the assignment).
    shipped_names = {p.name for p in handout.rglob("*") if p.is_file()}
    staff_names = {p if Path(p).name in shipped_names else Path(p).name for p in STAFF_ONLY if not p.endswith("/")}
    staff_names |= {p.rstrip("/") for p in STAFF_ONLY if p.endswith("/") and p != "grading/"}
    staff_names |= {"grading.e2e", "bench.models", "bench.tune", "bench.profile_device", "grading.grade", "grading.calibrate", "make calibrate",
                    "make tune", "make autograder", "make handout", "make device", "OCLF_CONV_KERNEL",
                    "torch_opencl"}
    staff_names |= {s.variable for s in settings.SETTINGS.values() if s.staff}  # the staff tree's table
    help_text = subprocess.run(["make", "-s", "-o", ".venv/.requirements", "help"], cwd=handout,
                               capture_output=True, text=True, timeout=60).stdout
    assert "make run" in help_text
    documents = {p.relative_to(handout).as_posix(): p.read_text() for p in handout.rglob("*.md")}
    documents["make help"] = help_text
    for name, text in documents.items():
        # Whole names: "device.py" (a staff module) is not test_device.py (a student's test file).
        found = sorted(word for word in staff_names if re.search(r"(?<![\w.])" + re.escape(word) + r"(?!\w)", text))
        assert not found, f"{name} names {found}"
        for module in re.findall(r"python -m ([a-z_]+(?:\.[a-z_]+)+)", text):
            assert (handout / (module.replace(".", "/") + ".py")).is_file(), f"{name}: {module}"


def test_every_device_test_stays_with_the_staff():
    """The handout has no device: a device test shipped in it fails there (test_device_async.py
    once did, six failures in the handout's own make test)."""
    from grading.handout import is_staff_only, project_files

    shipped = [f for f in project_files() if f.startswith("tests/") and Path(f).name.startswith(("test_device_", "device_"))
               and not is_staff_only(f)]
    assert not shipped, shipped
    # By pattern, so a new device test stays too; the device's own package wherever it lives.
    for staff in ("tests/test_device_new.py", "torch_opencl/__init__.py", "torch_opencl/csrc/aten/x.cpp",
                  "torch_opencl_autoload.py", "opencl_functions/device.py", "opencl_functions/device/__init__.py",
                  "setup_device.py"):
        assert is_staff_only(staff), staff
    assert not is_staff_only("tests/test_device.py")  # the library's device choice


# Words that name the opencl torch device (case matters: "OpenCL device" is the library's), as
# whole names: the library's opencl_functions/devices.py is not the device's old name.
DEVICE_WORDS = re.compile(r"\bopencl`? (torch )?device|torch device|opencl_functions[./]device\b|torch_opencl|"
                          r"PrivateUse1|make device|setup_device|_autoload|opencl:\d")


def test_handout_documents_name_no_device_and_no_sandbox(handout):
    """The handout has no torch device and no grader sandbox: its documents say nothing of them,
    and its tests/README.md maps its own tests, no other."""
    for path in sorted(handout.rglob("*.md")):
        text = path.read_text()
        rel = path.relative_to(handout).as_posix()
        assert not DEVICE_WORDS.search(text), f"{rel}: {DEVICE_WORDS.search(text)[0]!r}"
        assert "sandbox" not in text.lower(), rel
    assert not re.search(r"(?i)grader_|sandbox", (handout / "README.md").read_text())
    listed = set(re.findall(r"^\| `(test_\w+\.py)`", (handout / "tests" / "README.md").read_text(), re.M))
    assert listed == {p.name for p in (handout / "tests").glob("test_*.py")}


def test_handout_settings_are_everyones(handout):
    """The handout's settings module, and so its README's table (test_config.py checks the
    two agree, there as here), holds the settings for everyone, none of the staff's."""
    spec = importlib.util.spec_from_file_location("handout_settings", handout / "opencl_functions" / "settings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    everyones = [s.name for s in settings.SETTINGS.values() if not s.staff]
    assert list(module.SETTINGS) == everyones
    assert {"GRADER_USER", "GRADER_PYTHON", "GRADER_NAMESPACES", "FALLBACK"} <= set(settings.SETTINGS) - set(everyones)


# The handout's tools whose option runs on the opencl torch device, which the handout lacks:
# that option stops there on the device's ImportError. They move into staff regions with the
# device's move to a package of its own.
DEVICE_OPTIONS = {"bench/layers.py": "--replay", "extras/train_audio.py": "--device opencl",
                  "extras/validation/networks.py": "--device opencl"}
DEVICE_MODULES = ("opencl_functions.device", "torch_opencl")


def _imports(path: Path):
    """The module names a Python file imports: import statements anywhere in it, the modules
    of `from M import N` with each M.N (a submodule or a name), importlib.import_module("...")."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value


def _module_file(root: Path, name: str):
    base = root.joinpath(*name.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def test_every_project_import_in_the_handout_finds_its_module_there(handout):
    """No file of the handout imports a module the handout leaves out (a staff module, the
    device where it is now or in its own package), at the top or inside a function."""
    missing, options = [], set()
    for path in sorted(handout.rglob("*.py")):
        rel = path.relative_to(handout).as_posix()
        for name in sorted(set(_imports(path))):
            device = any(name == m or name.startswith(m + ".") for m in DEVICE_MODULES)
            if device and rel in DEVICE_OPTIONS:
                options.add(rel)
            elif device or (_module_file(ROOT, name) is not None and _module_file(handout, name) is None):
                missing.append(f"{rel} imports {name}")
    assert not missing, "\n".join(missing)
    assert options == set(DEVICE_OPTIONS)  # no stale entry


@pytest.mark.serial
@pytest.mark.timeout(3600)
def test_handout_done_as_asked_passes_its_own_make_test_and_check(tmp_path, ocl):
    """A student's tree: the handout with the reference's own answer in the two student files
    (their solution view: the solution regions, no staff code). Its own `make test` and
    `make check` pass there (`make run` is the allowed-calls check and tests.py, both in
    these). The tree shares this checkout's .venv (a link; `-o .venv/.requirements` takes the
    set-up step as done: CI's clean clone covers the set-up itself) and builds its own module.
    Serial: its suite runs its own two workers, and its demos compare timed runs."""
    from grading import fixtures

    tree = tmp_path / "student"
    make_handout(tree)
    for name, text in fixtures.base_files("solution").items():
        (tree / fixtures.STUDENT_FILES[name]).write_text(text)
    (tree / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "tmp").mkdir()
    # Nothing of this run reaches the tree's: no PYTHONPATH to this checkout, no pytest options,
    # a temporary folder of its own (pytest prunes old runs' folders under its base).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST_")}
    env["TMPDIR"] = str(tmp_path / "tmp")
    outputs = {}
    for target, timeout in (("test", 2400), ("check", 900)):
        proc = subprocess.run(["make", "-o", ".venv/.requirements", target], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=timeout)
        assert proc.returncode == 0, f"make {target}:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
        assert str(ROOT / "opencl_functions") not in proc.stdout  # its own build, not the reference's
        outputs[target] = proc.stdout
    passed = re.search(r"(\d+) passed", outputs["test"])
    assert passed and int(passed.group(1)) > 100, outputs["test"][-3000:]  # the whole suite ran
    assert "check: no data races, no out-of-bounds accesses, results match torch" in outputs["check"]
