"""The benchmarks against their peers: peaks by device name (bench.peaks), FLOPs counted by
torch's FlopCounterMode against hand counts, torch's side in its child process (bench.peers,
run here on the CPU: each memory format, a capture that fails reported with its reason), the
micro-benchmark and whole-model records of the quick suites on this device, and
docs/PERFORMANCE.md's tables rendered from records (bench.report)."""
import argparse
import json
import math

import pytest
import torch
import torch.nn.functional as F

from bench import peaks, peers, report

H200 = {"device": "NVIDIA H200", "device_type": "GPU", "platform": "NVIDIA CUDA", "host_cpu": "Intel Xeon, 16 CPUs",
        "torch": "2.11.0", "cuda": "NVIDIA H200", "date": "2026-11-30"}


@pytest.mark.parametrize("name, entry", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"), ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA GH200 480GB", None),
    ("pthread-skylake-avx512-AMD EPYC", None),
])
def test_peaks_by_device_name(name, entry, monkeypatch):
    monkeypatch.delenv("OCLF_PEAKS", raising=False)
    found = peaks.lookup(name)
    assert (found.name if found else None) == entry


def test_peak_shares(monkeypatch):
    monkeypatch.delenv("OCLF_PEAKS", raising=False)
    h200 = peaks.lookup("NVIDIA H200")
    assert h200.flops("float16") == h200.flops("bfloat16") == pytest.approx(989.4e12)
    assert h200.flops("tf32") == pytest.approx(494.7e12) and h200.bytes_per_s() == pytest.approx(4.8e12)
    # 8.18 GFLOP in 2 ms: 4.09 TFLOP/s, 6.1 % of 66.9 (float32), 0.41 % of 989.4 (float16).
    assert peaks.percent(peaks.fraction(8.18e9, 2e-3, h200, "float32")) == "6.1 %"
    assert peaks.percent(peaks.fraction(8.18e9, 2e-3, h200, "float16")) == "0.41 %"
    assert peaks.fraction(8.18e9, 2e-3, None, "float32") is None and peaks.percent(None) == "n/a"


def test_peaks_setting_completes_or_replaces_the_table(monkeypatch):
    monkeypatch.setenv("OCLF_PEAKS", "fp32=1.5, bw=0.1")
    cpu = peaks.lookup("pthread-skylake-avx512-AMD EPYC")
    assert (cpu.fp32, cpu.bw, cpu.fp16) == (1.5, 0.1, None)
    assert peaks.fraction(1.5e12, 1.0, cpu, "float32") == pytest.approx(1.0)
    h200 = peaks.lookup("NVIDIA H200")
    assert (h200.fp32, h200.fp16) == (1.5, 989.4)
    for bad, words in (("fp64=3", "fp64=3"), ("fp32=fast", "'fast' is not a number"), ("fp16=-1", "positive"),
                       ("fp32", "'fp32'")):
        monkeypatch.setenv("OCLF_PEAKS", bad)
        with pytest.raises(ValueError, match="OCLF_PEAKS") as err:
            peaks.lookup("NVIDIA H200")
        assert words in str(err.value)


def test_flops_counted_as_by_hand():
    x, w = torch.randn(7, 33), torch.randn(65, 33)
    assert peaks.count_flops(lambda: F.linear(x, w)) == peaks.gemm_flops(7, 33, 65)
    img, k = torch.randn(2, 6, 11, 9), torch.randn(4, 3, 3, 2)
    out = F.conv2d(img, k, stride=(2, 1), groups=2)
    assert peaks.count_flops(lambda: F.conv2d(img, k, stride=(2, 1), groups=2)) == 2 * out.numel() * 3 * 3 * 2
    # torch's CPU attention kernel, which FlopCounterMode's own table lacks: Q·Kᵀ and P·V.
    q, kv = torch.randn(2, 3, 17, 8), torch.randn(2, 3, 29, 8)
    assert peaks.count_flops(lambda: F.scaled_dot_product_attention(q, kv, kv)) == \
        peaks.attention_flops(2, 3, 17, 29, 8, causal=False) > 0
    assert peaks.attention_flops(1, 1, 64, 64, 8, causal=True) * 2 == peaks.attention_flops(1, 1, 64, 64, 8, False)


def test_model_flops_are_its_layers(ocl):
    """bench.models' FLOPs of ResNet-18 b1 equal the sum over its convolutions and its linear
    layer, counted from their output sizes by forward hooks."""
    import torchvision

    from bench import models

    counted = []

    def hook(module, inputs, out):
        if isinstance(module, torch.nn.Conv2d):
            per_output = module.in_channels // module.groups * math.prod(module.kernel_size)
        else:
            per_output = module.in_features
        counted.append(2 * out.numel() * per_output)

    net = torchvision.models.resnet18().eval()
    for m in net.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        net(torch.randn(1, 3, 224, 224))
    assert models.flops("resnet18") == sum(counted)


def test_torch_side_times_each_memory_format_and_names_what_failed(ocl):
    """bench.peers' child on the CPU: a 16-bit convolutional model in NCHW and channels_last,
    the faster the peer's eager time; its CUDA graph cannot be captured here, which the
    result says per format instead of dropping it; a child past its time is reported so."""
    result = peers.measure("resnet18", "replay", rounds=1, dtype="float16", conv=True, device="cpu")
    assert result["torch_cuda_nchw"] > 0 and result["torch_cuda_channels_last"] > 0
    assert result["torch_cuda"] == min(result["torch_cuda_nchw"], result["torch_cuda_channels_last"])
    assert result["torch_cuda_format"] in ("nchw", "channels_last")
    assert set(result["cuda_errors"]) == {"torch_cuda_graph_nchw", "torch_cuda_graph_channels_last"}
    assert result["peer"] is None  # the replayed row's peer is the graph
    assert "CUDA graph" not in peers.describe(result, 1.0).split("failed")[0]
    late = peers.measure("resnet18", "compile", rounds=1, dtype="float32", conv=True, compile_modes=["default"],
                         timeout=0.5, device="cpu")
    assert "timed out" in late["cuda_errors"]["torch_cuda_compile"] and late["peer"] is None
    assert peers.layouts(True, "float32") == ["nchw"] and peers.layouts(False, "bfloat16") == ["nchw"]


def test_compile_modes_split_over_runs_make_one_row():
    """bench.models --compile with some of torch's compile modes, over a row that has others."""
    old = {"torch_cuda_compile": 0.08, "cuda_errors": {"torch_cuda_max_autotune": "timed out after 600 s"},
           "peer": "torch_cuda_compile"}
    new = {"torch_cuda_max_autotune": 0.05, "cuda_errors": {}, "peer": "torch_cuda_max_autotune", "opencl": 0.06}
    merged = peers.keep_other_modes(old, new, ["max-autotune"])
    assert merged["torch_cuda_compile"] == 0.08 and merged["torch_cuda_max_autotune"] == 0.05
    assert merged["cuda_errors"] == {} and merged["peer"] == "torch_cuda_max_autotune"
    again = peers.keep_other_modes(merged, {"torch_cuda_compile": 0.04, "cuda_errors": {}}, ["default"])
    assert again["peer"] == "torch_cuda_compile" and again["torch_cuda_max_autotune"] == 0.05


def test_suites_commands_and_budget(tmp_path):
    """bench.report's suites: the float16 one runs the models that take a dtype, the model
    suites pass torch CUDA's settings on, and a spent budget starts nothing."""
    ns = argparse.Namespace(model=["gpt2", "resnet50_train_b16"], quick=False, budget=0.0,
                            cuda_compile_modes="max-autotune", cuda_timeout=300.0)
    cmd = report.suite_command("models16", tmp_path, ns)
    assert cmd[1:3] == ["-m", "bench.models"] and "--dtype" in cmd and "float16" in cmd
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--model"] == ["gpt2"]
    assert cmd[cmd.index("--cuda-compile-modes") + 1] == "max-autotune" and "300.0" in cmd
    assert f"{tmp_path}/micro.json" in report.suite_command("micro", tmp_path, ns)
    assert report.run_suites(["micro", "compile"], tmp_path, ns) == {
        "micro": "not started: --budget spent", "compile": "not started: --budget spent"}


@pytest.fixture(scope="module")
def recorded(opencl_device, tmp_path_factory):
    """The one command's quick form: the micro-benchmark and ResNet-18's eager and replayed
    runs, each suite a process of its own, recorded and rendered."""
    out = tmp_path_factory.mktemp("perf")
    blocks = report.main(["--suite", "micro", "--suite", "models", "--model", "resnet18", "--quick", "--out", str(out),
                          "--no-doc"])
    return out, blocks


def test_micro_benchmark_records_every_case(recorded):
    out, _ = recorded
    rows = json.loads((out / "micro.json").read_text())["rows"]
    from bench import micro

    expected = {f"gemm:{s.name}:{d}" for s in micro.QUICK_GEMMS for d in micro.GEMM_DTYPES}
    expected |= {f"attention:{s.name}:{d}" for s in micro.QUICK_ATTENTIONS for d in micro.ATTENTION_DTYPES}
    assert set(rows) == expected
    tolerance = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 3e-2}  # against float32 on the same inputs
    for key, row in rows.items():
        assert row["max_rel_error"]["ours"] < tolerance[row["dtype"]], key
        assert row["times_ns"]["ours"] > 0 and row["times_ns"]["torch"] > 0, key
        assert row["flops"] > 0 and row["machine"]["device_type"] == "CPU"


def test_models_record_rows_with_their_flops(recorded):
    out, blocks = recorded
    from bench import models

    rows = json.loads((out / "models.json").read_text())["rows"]
    assert set(rows) == {"device:resnet18:float32", "replay:resnet18:float32"}
    for row in rows.values():
        assert row["flops"] == models.flops("resnet18") and row["max_rel_error"] < 1e-4
        assert row["opencl"] > 0 and row["torch"] > 0
    text = (out / "tables.md").read_text()
    assert set(blocks) == {"perf-cpu"} and "ResNet-18 b1" in text and "torch CPU" in text
    assert "no peak known" in text


def _gpu_records():
    """A recorded GPU run's rows, as bench.models and bench.micro write them."""
    base = {"machine": H200, "rounds": 5, "fused": False, "flops": 8.18e9, "torch": 0.08, "torch_min": 0.07,
            "first_call": 1.0, "first_call_tuning": 0.0, "max_rel_error": 1e-6}
    eager = {**base, "mode": "device", "model": "resnet50", "label": "ResNet-50 b1 224x224 float16",
             "dtype": "float16", "opencl": 2e-3, "opencl_min": 1.9e-3, "torch_cuda": 3e-3, "torch_cuda_nchw": 4e-3,
             "torch_cuda_channels_last": 3e-3, "torch_cuda_format": "channels_last", "peer": "torch_cuda",
             "cuda_errors": {}}
    compiled = {**base, "mode": "compile", "model": "gpt2", "label": "GPT-2 8-token prompt + 16 tokens float32",
                "dtype": "float32", "opencl": 50e-3, "opencl_min": 49e-3, "torch_cuda_compile": 80e-3,
                "torch_cuda_max_autotune": 60e-3, "peer": "torch_cuda_max_autotune",
                "cuda_errors": {"torch_cuda_reduce_overhead": "killed by SIGSEGV: "}}
    gemm = {"kind": "gemm", "name": "4096x4096x4096", "what": "square", "dtype": "float32", "machine": H200,
            "flops": 2 * 4096**3, "bytes": 3 * 4096**2 * 4,
            "times_ns": {"ours": 4e6, "torch": 2.4e6, "torch_tf32": 4e5},
            "max_rel_error": {"ours": 1e-6, "torch": 1e-6, "torch_tf32": 1e-3}, "refused": {}}
    attention = {"kind": "attention", "name": "b4 h16 s1024 d64 causal", "what": "prefill", "dtype": "bfloat16",
                 "machine": H200, "flops": peaks.attention_flops(4, 16, 1024, 1024, 64, True),
                 "times_ns": {"ours": 200e3, "torch": 60e3, "flash": 50e3, "efficient": 90e3},
                 "max_rel_error": {"ours": 3e-3, "torch": 3e-3, "flash": 3e-3, "efficient": 3e-3},
                 "refused": {"cudnn": "No available kernel"}}
    return {"models": [eager, compiled], "micro": [gemm, attention], "layers": []}


def test_report_renders_a_recorded_gpu_run(tmp_path, monkeypatch):
    monkeypatch.delenv("OCLF_PEAKS", raising=False)
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text("# Performance\n\n<!-- BEGIN TABLE perf-gpu -->\nold\n<!-- END TABLE perf-gpu -->\n\n## History\n")
    blocks = report.write(_gpu_records(), tmp_path / "out", doc)
    text = blocks["perf-gpu"]
    assert set(blocks) == {"perf-gpu"}
    assert "NVIDIA H200 as H200 SXM: fp32 66.9, tf32 494.7, fp16 989.4, bf16 989.4 TFLOP/s, 4.8 TB/s" in text
    # Eager float16: ours 8.18 GFLOP in 2 ms (0.41 % of 989.4), channels_last the faster format,
    # CUDA 3 ms over ours 2 ms.
    assert "| ResNet-50 b1 224x224 float16 | 8.18 | 2.00 (1.90) | 0.41 % | 3.00 channels_last (NCHW 4.00) |" in text
    assert "**1.50×**" in text
    # Compiled: each mode a column, the failed one named, the fastest (max-autotune) the peer.
    assert "| 50.0 (49.0) | 0.24 % | 80.0 | failed | 60.0 | max-autotune | 0.20 % | **1.20×** |" in text
    assert "(compile), torch.compile reduce-overhead: killed by SIGSEGV" in text
    # 4096³ float32: 137 GFLOP in 4 ms is 34.4 TFLOP/s, 51 % of 66.9; cuBLAS with TF32 0.4 ms, 69 % of 494.7.
    assert "| 4096×4096×4096 (square) | float32 | 4000 (51.4 %) |" in text and "400 (69.5 %)" in text
    assert "**0.60×**" in text
    # Attention: cuDNN refused (n/a), flash the fastest.
    assert "| 200 (4.3 %) | 60.0 (14.5 %) | 50.0 (17.4 %) | n/a | 90.0 (9.6 %) | **0.25×** (flash) |" in text
    written = doc.read_text()
    assert "old" not in written and written.endswith("## History\n") and "Recorded 2026-11-30" in written
    assert (tmp_path / "out" / "tables.md").read_text().count("## perf-gpu") == 1


def test_performance_doc_holds_the_generated_blocks():
    text = (report.ROOT / "docs" / "PERFORMANCE.md").read_text()
    assert len(text.splitlines()) < 450
    for block in ("perf-gpu", "perf-cpu"):
        assert f"<!-- BEGIN TABLE {block} -->" in text and f"<!-- END TABLE {block} -->" in text
