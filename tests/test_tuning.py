"""Tuning at first use (runtime/tuning.hpp, reference/tuning.hpp): a shape is measured once and its
winner cached per device in OCLF_TUNE_DIR; later processes read it; OCLF_TUNE=0 and cache
never measure; a sweep marks its entries; an edited kernel is measured again; the
configuration and its origin reach last_choice(); the opencl device reads the cached conv
blocks. Each case runs in a fresh process."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, torch, opencl_functions as ocl
torch.manual_seed(0)
a = torch.randn(1, 768)
w = torch.nn.Parameter(torch.randn(768, 768) / 28, requires_grad=False)
out = ocl.ocl_matmul(a, w)
assert torch.allclose(out, a @ w, atol=1e-4, rtol=1e-4)
matmul = ocl.last_choice()
x = torch.randn(1, 32, 30, 30)
k = torch.nn.Parameter(torch.randn(32, 32, 3, 3) / 17, requires_grad=False)
torch.testing.assert_close(ocl.ocl_conv2d(x, k), torch.nn.functional.conv2d(x, k), atol=1e-4, rtol=1e-4)
print(json.dumps({"matmul": matmul, "conv": ocl.last_choice(), "seconds": ocl._core.tuning_seconds(),
                  "path": ocl._core.tuning_cache_path()}))
"""


def copy_kernels(ocl, folder: Path) -> None:
    """The library's .cl files with their folders (the reference's in reference/, with the
    headers they include), as OCLF_KERNEL_DIR takes them."""
    root = Path(ocl.KERNEL_DIR)
    for source in [*root.glob("*.cl"), *root.glob("reference/*.cl"), *root.glob("reference/*.h")]:
        target = folder / source.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)


def run(tmp_path, **env):
    full = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE_DIR": str(tmp_path / "cache"),
            "OCLF_TUNE_BUDGET": "60", **env}
    full.pop("OCLF_MATMUL", None)
    full.pop("OCLF_CONV_KERNEL", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_first_use_measures_once_then_reads_the_cache(ocl, tmp_path):
    first = run(tmp_path, OCLF_TUNE="1")
    assert first["matmul"]["origin"] == "tuned now" and first["conv"]["origin"] == "tuned now"
    assert first["seconds"] > 0
    cache = Path(first["path"])
    assert cache.parent == tmp_path / "cache" and cache.exists()
    lines = [line.split("\t") for line in cache.read_text().splitlines() if not line.startswith("#")]
    assert {line[3] for line in lines} == {"first use"}
    assert any(line[0].startswith("matmul.v1") and line[2] == first["matmul"]["config"] for line in lines)
    again = run(tmp_path, OCLF_TUNE="1")
    assert again["matmul"] == {"config": first["matmul"]["config"], "origin": "cache: first use"}
    assert again["conv"] == {"config": first["conv"]["config"], "origin": "cache: first use"}
    assert again["seconds"] == 0


def test_off_and_cache_modes_never_measure(ocl, tmp_path):
    off = run(tmp_path, OCLF_TUNE="0", OCLF_PROGRAM_CACHE="0")  # the folder holds program binaries too
    assert off["matmul"]["origin"] == off["conv"]["origin"] == "defaults" and off["seconds"] == 0
    assert not (tmp_path / "cache").exists()
    cached = run(tmp_path, OCLF_TUNE="cache")
    assert cached["matmul"]["origin"] == "defaults" and cached["seconds"] == 0
    run(tmp_path, OCLF_TUNE="1")
    assert run(tmp_path, OCLF_TUNE="cache")["matmul"]["origin"] == "cache: first use"
    assert run(tmp_path, OCLF_TUNE="0")["matmul"]["origin"] == "defaults"


def test_budget_bounds_first_use(ocl, tmp_path):
    spent = run(tmp_path, OCLF_TUNE="1", OCLF_TUNE_BUDGET="0")
    assert spent["matmul"]["origin"] == "defaults" and spent["seconds"] == 0


def test_sweep_entries_are_marked(ocl, tmp_path):
    assert run(tmp_path, OCLF_TUNE="sweep")["matmul"]["origin"] == "tuned now"
    assert run(tmp_path, OCLF_TUNE="1")["matmul"]["origin"] == "cache: sweep"


def test_an_edited_kernel_is_measured_again(ocl, tmp_path):
    kernels = tmp_path / "kernels"
    copy_kernels(ocl, kernels)
    run(tmp_path, OCLF_TUNE="1", OCLF_KERNEL_DIR=str(kernels))
    with open(kernels / "reference" / "matmul.cl", "a") as f:
        f.write("// edited\n")
    again = run(tmp_path, OCLF_TUNE="1", OCLF_KERNEL_DIR=str(kernels))
    assert again["matmul"]["origin"] == "tuned now" and again["conv"]["origin"] == "cache: first use"


def test_unknown_mode_is_an_error(ocl, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE": "maybe", "OCLF_TUNE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0 and "OCLF_TUNE must be 1, 0, cache or sweep, got maybe" in proc.stderr


DEVICE_CONV = """
import sys, torch, torch.nn.functional as F
import torch_opencl  # noqa: F401
torch.manual_seed(0)
x, k = torch.randn(1, 32, 30, 30), torch.randn(32, 32, 3, 3) / 17
try:
    y = F.conv2d(x.to("opencl"), k.to("opencl")).cpu()
except RuntimeError as err:
    print("error:", str(err).replace("\\n", " "))
    sys.exit(0)
torch.testing.assert_close(y, F.conv2d(x, k), atol=1e-4, rtol=1e-4)
print("ok")
"""


def fnv1a64(text: bytes) -> str:
    """The kernel source hash the tuning cache keys entries with (Tuning::hash)."""
    h = 1469598103934665603
    for byte in text:
        h = ((h ^ byte) * 1099511628211) % 2**64
    return f"{h:016x}"


def test_the_device_reads_the_cached_block_on_cpus(ocl, tmp_path):
    """The opencl device's conv2d_cpu takes the block the reference cached for the layer
    shape (one of its candidates: COV the device's vector width, PX = 4, not the default 8):
    a cached block that a kernel file rejects at build time fails the device's conv with that
    file's message, and OCLF_TUNE=0 ignores the cache."""
    info = ocl.device_info()
    if info["type"] != "CPU":
        pytest.skip("conv2d_cpu runs on CPU devices")
    width = max(info["preferred_vector_width_float"], info["native_vector_width_float"])
    cov = 16 if width >= 16 else 8 if width >= 8 else 4
    kernels = tmp_path / "kernels"
    copy_kernels(ocl, kernels)
    conv = kernels / "reference" / "conv2d_cpu.cl"
    guard = f"\n#if defined(COV) && COV == {cov} && PX == 4\n#error cached block read\n#endif\n"
    conv.write_text(conv.read_text() + guard)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE_DIR": str(tmp_path / "cache"),
           "OCLF_KERNEL_DIR": str(kernels)}
    for name in ("OCL_KERNEL_DIR", "OCLF_CONV_KERNEL", "OCLF_CPU_BLOCK"):
        env.pop(name, None)
    path = subprocess.run([sys.executable, "-c", "import opencl_functions as o; print(o._core.tuning_cache_path())"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout.strip()
    assert path.startswith(str(tmp_path / "cache"))
    key = "conv.v1 cpu B=1 Cin=32 H=30 W=30 Cout=32 K=3x3 S=1x1 D=1x1 G=1"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(f"# test\n{key}\t{fnv1a64(conv.read_bytes())}\tcpu COV={cov} PX=4\tsweep\n")

    def device_conv(tune: str) -> str:
        proc = subprocess.run([sys.executable, "-c", DEVICE_CONV], cwd=ROOT, env={**env, "OCLF_TUNE": tune},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip().splitlines()[-1]

    read = device_conv("cache")
    assert read.startswith("error:") and "cached block read" in read and f"-DCOV={cov} -DPX=4" in read, read
    assert device_conv("0") == "ok"


def test_the_device_measures_a_conv_block_at_first_use_on_cpus(ocl, tmp_path):
    """With nothing cached, the opencl device times conv2d_cpu's first-use candidates for the
    layer shape and caches the winner as the reference does; the next process reads it."""
    if ocl.device_info()["type"] != "CPU":
        pytest.skip("conv2d_cpu runs on CPU devices")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE_DIR": str(tmp_path / "cache"), "OCLF_TUNE": "1",
           "OCLF_TUNE_BUDGET": "60"}
    for name in ("OCLF_KERNEL_DIR", "OCL_KERNEL_DIR", "OCLF_CONV_KERNEL", "OCLF_CPU_BLOCK"):
        env.pop(name, None)
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", DEVICE_CONV], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]
        caches = list((tmp_path / "cache").glob("*.tsv"))
        assert len(caches) == 1
        lines = [line.split("\t") for line in caches[0].read_text().splitlines() if not line.startswith("#")]
        assert len(lines) == 1, lines  # measured once, read the second time
    key, _, choice, origin = lines[0]
    assert key == "conv.v1 cpu B=1 Cin=32 H=30 W=30 Cout=32 K=3x3 S=1x1 D=1x1 G=1"
    assert choice.startswith("cpu COV=") and origin == "first use"


WARM_UP = """
import json, os, torch, opencl_functions as ocl
from opencl_functions import tuning
torch.manual_seed(0)


def conv(c):
    x = torch.randn(1, c, 30, 30)
    k = torch.nn.Parameter(torch.randn(c, c, 3, 3) / 17, requires_grad=False)
    return lambda: ocl.ocl_conv2d(x, k)


_, first = tuning.warm_up(conv(32), "a 32-channel conv")
_, again = tuning.warm_up(conv(40), "a 40-channel conv")
spent = tuning.spent()
with tuning.paused():
    inside = os.environ["OCLF_TUNE"]
    conv(48)()
    paused = ocl.last_choice()
print(json.dumps({"first": vars(first), "again": vars(again), "note": first.note(), "paused": paused,
                  "spent_paused": tuning.spent() - spent, "inside": inside, "after": os.environ["OCLF_TUNE"]}))
"""


def run_fresh(script: str, tmp_path, **settings) -> subprocess.CompletedProcess:
    """script in a child with a fresh tuning cache under tmp_path, no forced kernel, and settings."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OCLF_TUNE_DIR": str(tmp_path / "cache"), **settings}
    for name in ("OCLF_CONV_KERNEL", "OCLF_CPU_BLOCK"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_warm_up_tunes_and_says_so_and_paused_measures_nothing(ocl, tmp_path):
    """tuning.warm_up: the first call of a workload tunes what the cache lacks, announced on stderr
    once per process, and its FirstCall counts the seconds, the shapes and the programs; inside
    paused() a new shape takes the defaults and nothing is measured; OCLF_TUNE comes back."""
    proc = run_fresh(WARM_UP, tmp_path, OCLF_TUNE="1", OCLF_TUNE_BUDGET="60",
                     OCLF_PROGRAM_CACHE=str(tmp_path / "programs"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    first, again = r["first"], r["again"]
    assert first["tuning_s"] > 0 and first["shapes_tuned"] == 1 and first["programs_built"] >= 1
    assert first["seconds"] >= first["tuning_s"] and first["budget_s"] == 60 and first["mode"] == "1"
    assert again["tuning_s"] > 0 and again["shapes_tuned"] == 1
    assert "first call of a 32-channel conv, untimed" in r["note"] and "tuning 1 shape(s)" in r["note"], r["note"]
    assert proc.stderr.count("measuring the shapes the tuning cache lacks") == 1, proc.stderr
    assert "tuning a 32-channel conv: measuring the shapes the tuning cache lacks, for about 60 s" in proc.stderr
    assert r["paused"]["origin"] == "defaults" and r["spent_paused"] == 0
    assert r["inside"] == "cache" and r["after"] == "1"


def test_tuning_settings_are_checked(monkeypatch):
    from opencl_functions import tuning

    monkeypatch.setenv("OCLF_TUNE_BUDGET", "soon")
    with pytest.raises(ValueError, match="OCLF_TUNE_BUDGET must be a number of seconds >= 0, got 'soon'"):
        tuning.budget()
    monkeypatch.setenv("OCLF_TUNE", "maybe")
    with pytest.raises(ValueError, match="OCLF_TUNE must be one of 1, 0, cache, sweep, got 'maybe'"):
        tuning.mode()
    monkeypatch.setenv("OCLF_TUNE", "0")
    with tuning.paused():
        assert os.environ["OCLF_TUNE"] == "0"  # off stays off
    monkeypatch.delenv("OCLF_TUNE")
    with tuning.sweeping():
        assert tuning.mode() == "sweep"
    assert "OCLF_TUNE" not in os.environ


BUDGET_MIDWAY = """
import json, os, torch, opencl_functions as ocl
torch.manual_seed(0)
x = torch.randn(1, 32, 30, 30)
k = torch.nn.Parameter(torch.randn(32, 32, 3, 3) / 17, requires_grad=False)
os.environ["OCLF_TUNE"] = "0"
ocl.ocl_conv2d(x, k)
default = ocl.last_choice()
os.environ["OCLF_TUNE"] = "1"
ocl.ocl_conv2d(x, k)
print(json.dumps({"default": default, "tuned": ocl.last_choice()}))
"""


def test_a_budget_spent_midway_leaves_the_other_candidates_out(ocl, tmp_path):
    """A budget that runs out after the first candidate (the default) of a shape stops there: the
    shape keeps the default, measured, instead of every candidate running past the budget."""
    proc = run_fresh(BUDGET_MIDWAY, tmp_path, OCLF_TUNE_BUDGET="1e-9")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["default"]["origin"] == "defaults"
    assert r["tuned"] == {"config": r["default"]["config"], "origin": "tuned now"}
