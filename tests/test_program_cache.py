"""The program cache between processes (runtime/program_cache.hpp): a program built in one
process is loaded from its stored binary in the next instead of being compiled again; an
edited source, an edited included header or other build options build again; a corrupt,
truncated or foreign file is ignored and replaced; a folder that cannot be written, or that
others could write, leaves programs built from source; the launch log (the grader's
children) and OCLF_PROGRAM_CACHE=0 build from source and store nothing (that the grader
turns the cache off for its children: test_grading.py). Each case runs fresh processes that load _core alone
(no torch) and build small kernels, except the check that a model's results are identical."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Builds kernel "k" of each (file, options) in argv[2] (JSON) through the runtime, then
# prints the device's program cache counters.
CHILD = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("opencl_functions._core", sys.argv[1])
core = importlib.util.module_from_spec(spec)
spec.loader.exec_module(core)
if sys.argv[3] == "log":
    core._launch_log_start(False)
for file, options in json.loads(sys.argv[2]):
    core._build_kernel(file, "k", options)
print(json.dumps(core.program_cache(core.current_device())))
"""

KERNEL = """// A kernel of the program cache's tests.
#include "scale.h"
__kernel void k(__global float* y) { y[get_global_id(0)] *= SCALE * FACTOR; }
"""
HEADER = "#define SCALE 2.0f\n"


@pytest.fixture
def tree(tmp_path):
    """A kernel that includes a header from an -I folder, and the cache folder to use."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "k.cl").write_text(KERNEL)
    (tmp_path / "inc" / "scale.h").write_text(HEADER)
    return tmp_path


def core_path(ocl) -> str:
    return ocl._core.__file__


def build(ocl, tree: Path, steps=None, cache=None, log=False, env=None, expect_ok=True):
    """Runs CHILD in a fresh process; returns its program cache counters (or the process when
    expect_ok is False)."""
    steps = steps if steps is not None else [(str(tree / "k.cl"), "-Iinc -DFACTOR=3.0f")]
    full = {**os.environ, "OCLF_PROGRAM_CACHE": str(cache or tree / "bins"), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", CHILD, core_path(ocl), json.dumps(steps), "log" if log else "-"],
                          cwd=tree, env=full, capture_output=True, text=True, timeout=300)
    if not expect_ok:
        return proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def binaries(folder: Path):
    return sorted(folder.glob("*.bin"))


def test_second_process_loads_the_binary(ocl, tree):
    cold = build(ocl, tree)
    assert (cold["programs_built"], cold["programs_loaded"], cold["binaries_stored"]) == (1, 0, 1)
    assert cold["folder"] == str(tree / "bins")
    assert len(binaries(tree / "bins")) == 1
    warm = build(ocl, tree)
    assert (warm["programs_built"], warm["programs_loaded"], warm["binaries_stored"]) == (0, 1, 0)
    assert warm["binaries_rejected"] == 0
    assert (tree / "bins").stat().st_mode & 0o077 == 0, "the folder is private"


def test_edited_source_header_or_options_build_again(ocl, tree):
    assert build(ocl, tree)["programs_built"] == 1
    other = [(str(tree / "k.cl"), "-Iinc -DFACTOR=4.0f")]
    assert build(ocl, tree, other)["programs_built"] == 1, "other options"
    assert build(ocl, tree, other)["programs_loaded"] == 1
    (tree / "inc" / "scale.h").write_text("#define SCALE 5.0f\n")
    assert build(ocl, tree)["programs_built"] == 1, "an edited included header"
    assert build(ocl, tree)["programs_loaded"] == 1
    (tree / "k.cl").write_text(KERNEL.replace("*=", "+="))
    assert build(ocl, tree)["programs_built"] == 1, "an edited source"
    assert build(ocl, tree)["programs_loaded"] == 1
    assert len(binaries(tree / "bins")) == 4


def test_nested_headers_and_the_sources_own_folder_are_keyed(ocl, tree):
    (tree / "inc" / "scale.h").write_text('#include "inner.h"\n')
    (tree / "inc" / "inner.h").write_text(HEADER)
    (tree / "factor.h").write_text("#define FACTOR 3.0f\n")  # beside k.cl, as reference/epilogue.h is
    (tree / "k.cl").write_text('#include "factor.h"\n' + KERNEL)
    steps = [(str(tree / "k.cl"), "-Iinc -I.")]
    assert build(ocl, tree, steps)["programs_built"] == 1
    assert build(ocl, tree, steps)["programs_loaded"] == 1
    (tree / "inc" / "inner.h").write_text("#define SCALE 7.0f\n")
    assert build(ocl, tree, steps)["programs_built"] == 1, "an edited header included by a header"
    (tree / "factor.h").write_text("#define FACTOR 9.0f\n")
    assert build(ocl, tree, steps)["programs_built"] == 1, "an edited header beside the source"
    assert build(ocl, tree, steps)["programs_loaded"] == 1


def test_a_source_finds_the_headers_beside_it(ocl, tree):
    """A source with #include lines builds with its own folder on the include path (as the
    reference's kernels include their preamble.h), no -I of the caller's, from another working
    folder; the header keys its binary."""
    (tree / "sub").mkdir()
    (tree / "sub" / "near.h").write_text(HEADER + "#define FACTOR 3.0f\n")
    (tree / "sub" / "k.cl").write_text(KERNEL.replace('"scale.h"', '"near.h"'))
    steps = [(str(tree / "sub" / "k.cl"), "")]
    assert build(ocl, tree, steps)["programs_built"] == 1
    assert build(ocl, tree, steps)["programs_loaded"] == 1
    (tree / "sub" / "near.h").write_text("#define SCALE 5.0f\n#define FACTOR 3.0f\n")
    assert build(ocl, tree, steps)["programs_built"] == 1, "an edited header beside the source"


def test_an_include_that_names_no_file_is_never_cached(ocl, tree):
    (tree / "k.cl").write_text('#ifdef NEVER\n#include "missing.h"\n#endif\n' + KERNEL)
    for _ in range(2):
        counts = build(ocl, tree)
        assert (counts["programs_built"], counts["programs_loaded"], counts["binaries_stored"]) == (1, 0, 0)


def test_a_damaged_file_is_ignored_and_replaced(ocl, tree):
    build(ocl, tree)
    [path] = binaries(tree / "bins")
    for damage in ["truncated", "garbled binary", "garbled key", "bad header", "empty"]:
        data = bytearray(path.read_bytes())
        header_end = data.index(b"\n") + 1
        if damage == "truncated":
            data = data[: len(data) // 2]
        elif damage == "garbled binary":
            data[-10] ^= 0xFF
        elif damage == "garbled key":
            data[header_end + 30] ^= 0x01
        elif damage == "bad header":
            data[:header_end] = b"oclf-program-binary 1 12 x\n"
        else:
            data = bytearray()
        path.write_bytes(bytes(data))
        counts = build(ocl, tree)
        assert (counts["programs_built"], counts["programs_loaded"], counts["binaries_rejected"]) == (1, 0, 1), damage
        assert counts["binaries_stored"] == 1, damage
    assert build(ocl, tree)["programs_loaded"] == 1, "the damaged file was rewritten"


def test_a_folder_that_cannot_be_written_builds_from_source(ocl, tree):
    (tree / "a_file").write_text("not a folder")
    for _ in range(2):
        counts = build(ocl, tree, cache=tree / "a_file" / "bins")
        assert (counts["programs_built"], counts["programs_loaded"], counts["binaries_stored"]) == (1, 0, 0)


@pytest.mark.parametrize("how", ["others may write it", "another user owns it"])
def test_a_folder_others_could_write_is_left_alone(ocl, tree, how):
    """A binary planted where another account could write is never loaded."""
    build(ocl, tree)
    [good] = binaries(tree / "bins")
    shared = tree / "shared"
    shared.mkdir()
    shutil.copy(good, shared / good.name)
    if how == "others may write it":
        os.chmod(shared, 0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(shared, 65534, 65534)
        os.chown(shared / good.name, 65534, 65534)
    counts = build(ocl, tree, cache=shared)
    assert (counts["programs_built"], counts["programs_loaded"], counts["binaries_stored"]) == (1, 0, 0)


def test_launch_log_and_setting_zero_build_from_source(ocl, tree):
    build(ocl, tree)
    logged = build(ocl, tree, log=True)
    assert (logged["programs_built"], logged["programs_loaded"], logged["binaries_stored"]) == (1, 0, 0)
    assert logged["folder"] == ""
    off = build(ocl, tree, env={"OCLF_PROGRAM_CACHE": "0"})
    assert (off["programs_built"], off["programs_loaded"], off["folder"]) == (1, 0, "")
    assert len(binaries(tree / "bins")) == 1


def test_default_folder_is_beside_the_tuning_cache(ocl, tree):
    env = {"OCLF_PROGRAM_CACHE": "1", "OCLF_TUNE_DIR": str(tree / "tune")}
    counts = build(ocl, tree, env=env)
    assert counts["folder"] == str(tree / "tune" / "programs") and counts["binaries_stored"] == 1
    assert build(ocl, tree, env=env)["programs_loaded"] == 1


def test_a_bad_setting_names_itself(ocl, tree):
    proc = build(ocl, tree, env={"OCLF_PROGRAM_CACHE": "maybe"}, expect_ok=False)
    assert proc.returncode != 0 and "OCLF_PROGRAM_CACHE must be 1, 0 or a folder" in proc.stderr


def test_two_processes_writing_at_once(ocl, tree):
    steps = json.dumps([(str(tree / "k.cl"), "-Iinc -DFACTOR=3.0f")])
    env = {**os.environ, "OCLF_PROGRAM_CACHE": str(tree / "bins")}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, core_path(ocl), steps, "-"], cwd=tree, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    assert [p.name for p in (tree / "bins").iterdir()] == [binaries(tree / "bins")[0].name], "no temporary left"
    assert build(ocl, tree)["programs_loaded"] == 1


RESULTS = """
import hashlib, json, torch, opencl_functions as ocl
torch.manual_seed(0)
x = torch.randn(2, 7, 33, 17)
w = torch.randn(5, 7, 3, 3)
b = torch.randn(5)
y = ocl.ocl_conv2d(x, w, b, stride=2)
torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, b, stride=2), atol=1e-4, rtol=1e-4)
print(json.dumps({"digest": hashlib.sha256(y.numpy().tobytes()).hexdigest(),
                  "cache": ocl._core.program_cache(ocl._core.current_device())}))
"""


def test_results_from_loaded_binaries_are_identical(ocl, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_PROGRAM_CACHE": str(tmp_path / "bins")}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", RESULTS], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["cache"]["programs_built"] > 0 and cold["cache"]["programs_loaded"] == 0
    assert warm["cache"]["programs_built"] == 0 and warm["cache"]["programs_loaded"] == cold["cache"]["programs_built"]
    assert warm["digest"] == cold["digest"]
