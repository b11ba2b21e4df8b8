"""The benchmark's quick mode runs end to end and writes a sane bench.json and bench.png."""
import json

import pytest

from bench import layers as bench


def test_bench_quick(ocl, tmp_path):
    bench.main(["--out", str(tmp_path), "--quick", "--torch-device", "cpu"])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert result["device"]["device"] == ocl.device_info()["device"]
    assert result["host_cpu"]  # the CPU goes with every figure
    for group in ("resnet50", "depthwise", "gpt2"):
        rows = result["groups"][group]
        assert rows, group
        for row in rows:
            assert row["max_rel_error"] < 1e-4, row["name"]
            assert row["times_ns"]["ours"] > 0 and row["times_ns"]["torch"] > 0
        assert result["geomean"][group]["torch/ours"] > 0
    floor = result["launch_floor_ns"]  # what an empty product takes on each side
    assert 0 < floor["ours"] < max(row["times_ns"]["ours"] for rows in result["groups"].values() for row in rows)
    assert floor["torch"] > 0
    conv = result["groups"]["resnet50"][0]["times_ns"]
    assert conv["convgemm"] > 0 and conv["naive"] > 0 and conv["tiled"] > 0


def test_baselines_match_torch(ocl):
    import torch
    import torch.nn.functional as F

    from bench.baselines import clblast_convgemm, naive_conv2d

    torch.manual_seed(0)
    x, w, b = torch.randn(2, 6, 11, 9), torch.randn(4, 3, 3, 2), torch.randn(4)
    for fn in (naive_conv2d,):
        out, ns = fn(x, w, b, stride=(2, 1), dilation=(1, 2), groups=2)
        torch.testing.assert_close(out, F.conv2d(x, w, b, (2, 1), 0, (1, 2), 2), atol=1e-4, rtol=1e-4)
        assert ns > 0
    w1 = torch.randn(7, 6, 3, 2)
    out, ns = clblast_convgemm(x, w1, stride=(1, 2), dilation=(2, 1))
    torch.testing.assert_close(out, F.conv2d(x, w1, None, (1, 2), 0, (2, 1)), atol=1e-4, rtol=1e-4)
    assert ns > 0


def test_tensor_core_probe_says_what_each_device_does(capsys):
    """bench.tensor_cores: on NVIDIA's OpenCL the inline-PTX product runs and matches numpy;
    any other device refuses the kernel at build time, and the probe says so."""
    import pyopencl as cl

    from bench import tensor_cores

    for platform in cl.get_platforms():
        for device in platform.get_devices():
            verdict = tensor_cores.probe(device)
            expected = "runs:" if "NVIDIA" in platform.name else "refused:"
            assert verdict.startswith(expected), verdict
    assert tensor_cores.main([]) == 0
    assert capsys.readouterr().out.strip()


# BEGIN STAFF
# The opencl torch device's benchmarks (staff).
def test_bench_replayed_layers(opencl_device, tmp_path):
    # --replay adds each layer on the device, recorded 20 times and replayed: a time per call.
    result = bench.main(["--out", str(tmp_path), "--quick", "--torch-device", "cpu", "--replay",
                         "--only", "depthwise", "--only", "gpt2"])
    for group in ("depthwise", "gpt2"):
        for row in result["groups"][group]:
            assert row["times_ns"]["replayed"] > 0, row["name"]
        assert result["geomean"][group]["torch/replayed"] > 0
    assert "resnet50" not in result["groups"]


def test_replayed_device_run_matches_torch(opencl_device):
    from bench.models import compare_device

    result = compare_device("resnet18", rounds=1, replay=True)
    assert result["max_rel_error"] < 1e-4
    assert result["opencl"] > 0 and result["torch"] > 0


def test_fused_device_run_matches_torch(opencl_device, monkeypatch):
    """bench.models --fuse: the device runs torch_opencl.fuse()'s model, torch the model."""
    from bench import models

    monkeypatch.setattr(models, "FUSE", True)
    result = models.compare_device("resnet18", rounds=1)
    assert result["max_rel_error"] < 1e-4


@pytest.mark.slow
def test_compiled_device_run_matches_torch(opencl_device):
    """bench.models --compile: torch.compile(model) on the device (compiled, recorded, then
    timed replays); the CUDA columns come only where CUDA is."""
    from bench.models import compare_device

    result = compare_device("resnet18", rounds=1, compile=True)
    assert result["max_rel_error"] < 1e-4
    assert result["opencl"] > 0 and result["torch"] > 0


def test_ops_microbenchmark_quick(opencl_device, tmp_path):
    """bench.ops times every op of its list on the device and on the CPU, and the driver's
    own enqueue floor: positive, finite microseconds, the JSON as printed."""
    from bench import ops

    out = tmp_path / "ops.json"
    result = ops.main(["--quick", "--number", "5", "--json", str(out)])
    assert set(result["ops"]) == set(ops.OPS)
    for name, row in result["ops"].items():
        assert 0 < row["opencl"] < 1e6 and 0 < row["cpu"] < 1e6, (name, row)
    assert 0 < result["enqueue_ns"]["call"] <= result["enqueue_ns"]["with_wait"]
    assert json.loads(out.read_text())["ops"] == result["ops"]
# END STAFF
