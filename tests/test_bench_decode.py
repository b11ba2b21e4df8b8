"""bench.decode, LLM decoding token by token, in its tiny configurations on this device: our
greedy tokens are the CPU's (transformers' own generate() among them), float32 logits within
float32 rounding of torch's on the CPU and float16 ones within 16-bit rounding, commands per
token counted alike by the kernel profile and the recording; the bytes a token reads counted
by hand; torch's side in its child process (a variant that cannot run here named with its
reason); bench.report's llama suite recorded and rendered, and the table of a recorded GPU row.
The compiled mode is slow (compiling dominates on a CPU)."""
import argparse
import copy
import json

import pytest
import torch

from bench import decode, report

NEW = decode.QUICK_NEW


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny(request):
    """(name, the float32 CPU model, its prompt, its greedy tokens by transformers' generate)."""
    model = decode.build(request.param, True, "cpu", torch.float32)
    prompt = decode.prompt_of(model, True)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
    return request.param, model, prompt, out[0, prompt.shape[1]:].tolist()


def on_device(model, dtype=torch.float32):
    return copy.deepcopy(model).to(device="opencl", dtype=dtype)


def test_decoder_on_the_cpu_is_generate(tiny):
    """The benchmark's own loop (dynamic and static caches) against transformers' generate()."""
    name, model, prompt, tokens = tiny
    for static in (False, True):
        dec = decode.Decoder(model, prompt, NEW, static=static)
        dec.run(dec.step)
        assert dec.tokens.tolist() == tokens, (name, static)
        ref = decode.reference(model, prompt, dec.tokens)
        torch.testing.assert_close(dec.logits, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "replay"])
def test_our_greedy_tokens_are_the_cpus(opencl_device, tiny, mode):
    name, model, prompt, tokens = tiny
    result = decode.measure_ours(on_device(model), prompt, NEW, mode, 1, model)
    assert result["tokens"] == tokens, (name, mode)
    assert result["tokens_agree"] == NEW and result["max_rel_error"] < 1e-5
    assert result["seconds"] > 0 and result["first_call"] > 0 and result["launches_per_token"] > 0
    assert 0 < result["host_per_token"] < result["seconds"]


def test_float16_logits_within_16bit_rounding(opencl_device, tiny):
    """float16 on the device against float32 on the CPU fed the same tokens."""
    name, model, prompt, _ = tiny
    device_model = on_device(model, torch.float16)
    for mode in ("eager", "replay"):
        result = decode.measure_ours(device_model, prompt, NEW, mode, 1, model)
        assert result["max_rel_error"] < 1e-2, (name, mode, result["max_rel_error"])


def test_commands_per_token_counted_alike(opencl_device, tiny):
    """A static-cache step under the kernel profile launches what its recording holds."""
    dev = decode.device_module()
    _, model, prompt, _ = tiny
    dec = decode.Decoder(on_device(model), prompt, NEW, static=True)
    dec.prefill()
    dec.step()
    with dev.kernel_profile() as prof:
        dec.step()
    _, recorded = decode.prepared(dec, "replay", dev.synchronize, count=None)
    assert recorded == len(prof.launches) > 0


def test_bytes_a_token_reads_by_hand():
    cfg = decode.config("llama", True)
    llama = decode.build("llama", True, "cpu", torch.float32)
    every = sum(p.numel() for p in llama.parameters())
    weights = every - cfg.vocab_size * cfg.hidden_size + cfg.hidden_size  # the embedding: one row
    per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    positions = sum(7 + t for t in range(1, NEW))  # the keys and values so far, at each step
    assert decode.bytes_per_run(llama, 7, NEW, torch.float16) == 2 * (NEW * weights + positions * per_position)
    gpt2 = decode.build("gpt2", True, "cpu", torch.float32)  # its output is its embedding: read whole, once
    cfg = gpt2.config
    weights = sum(p.numel() for p in gpt2.parameters()) - cfg.n_positions * cfg.n_embd + cfg.n_embd
    per_position = 2 * cfg.n_layer * cfg.n_embd
    assert decode.bytes_per_run(gpt2, 7, NEW, torch.float32) == 4 * (NEW * weights + positions * per_position)


def test_torch_side_names_what_it_cannot_run(tiny):
    """The child on the CPU: eager decodes the CPU's tokens; a CUDA graph fails with its reason."""
    name, _, _, tokens = tiny
    found, errors = decode.measure_peer(name, True, "float16", 1, "cpu", ["eager", "graph"], 300)
    assert found["eager"]["seconds"] > 0 and found["eager"]["tokens"] == tokens  # float32 on the CPU
    assert "graph" not in found and errors["graph"]
    late, why = decode.measure_peer(name, True, "float16", 1, "cpu", ["eager"], 0.5)
    assert not late and "timed out" in why["eager"]


def test_report_suite_records_and_renders(opencl_device, tmp_path):
    ns = argparse.Namespace(model=["gpt2", "resnet18"], quick=True, cuda_timeout=300.0, cuda_compile_modes="default")
    cmd = report.suite_command("llama", tmp_path, ns)
    assert cmd[1:3] == ["-m", "bench.decode"] and "--quick" in cmd
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--model"] == ["gpt2"]
    blocks = report.main(["--suite", "llama", "--model", "llama", "--quick", "--out", str(tmp_path), "--no-doc"])
    rows = json.loads((tmp_path / "decode.json").read_text())["rows"]
    assert set(rows) == {"llama:float16:quick"}
    row = rows["llama:float16:quick"]
    assert set(row["ours"]) == {"eager", "replay"} and not row["ours_errors"]
    assert row["peer_device"] == "cpu" and set(row["torch"]) == {"eager"}
    assert row["ours"]["eager"]["tokens"] == row["ours"]["replay"]["tokens"]
    text = (tmp_path / "tables.md").read_text()
    assert set(blocks) == {"perf-cpu"} and "**LLM decoding**" in text and "torch CPU eager" in text
    assert "**Commands per generated token**" in text


def test_report_renders_a_recorded_gpu_decode_row(tmp_path, monkeypatch):
    monkeypatch.delenv("OCLF_PEAKS", raising=False)
    machine = {"device": "NVIDIA H200", "device_type": "GPU", "platform": "NVIDIA CUDA", "host_cpu": "Xeon",
               "torch": "2.11.0", "cuda": "NVIDIA H200", "date": "2026-12-01"}
    # 128 tokens: 2.4e11 bytes a run in 0.64 s is 375 GB/s, 7.8 % of 4.8 TB/s.
    row = {"model": "llama", "label": "Llama", "dtype": "float16", "quick": False, "prompt_tokens": 16,
           "new_tokens": 128, "params": 1.1e9, "bytes_per_run": 2.4e11, "rounds": 5, "machine": machine,
           "ours": {"eager": {"seconds": 0.64, "launches_per_token": 1000, "tokens_agree": 128,
                              "host_per_token": 4.1e-3},
                    "replay": {"seconds": 0.128, "launches_per_token": 1100, "tokens_agree": 127}},
           "ours_errors": {"compile": "IndexError: out of range"}, "peer_device": "cuda",
           "torch": {"eager": {"seconds": 0.32, "launches_per_token": 400}, "graph": {"seconds": 0.096}},
           "torch_errors": {"reduce-overhead": "timed out after 600 s (--cuda-timeout)"}}
    text = report.write({"models": [], "micro": [], "decode": [row], "layers": []}, tmp_path, None)["perf-gpu"]
    # ours eager 5 ms/token (200/s), replayed 1 ms (1000/s, 39 %); CUDA eager 2.5 ms, graph 0.75 ms.
    assert "| Llama | 5.00 (200/s, 7.8 %) | 1.00 (1000/s, 39.1 %) | failed | 2.50 (400/s, 15.6 %) |" in text
    assert "| 0.750 (1333/s, 52.1 %) | failed | **0.50×** (eager / eager) | **0.75×** (replay / graph) |" in text
    # 5 ms over 1000 commands: 5 µs each, 4.1 of them the host's; CUDA's eager 2.5 ms over 400 kernels.
    assert "| Llama | 1000 (5.00 µs, host 4.10 µs) | 1100 (0.909 µs) | - | 400 (6.25 µs) |" in text
    assert "Llama, ours compile: IndexError" in text and "torch CUDA reduce-overhead: timed out" in text
    assert "ours replay: 127 of 128 tokens" in text


@pytest.mark.slow
def test_compiled_decoding_is_the_cpus(opencl_device, tiny):
    name, model, prompt, tokens = tiny
    result = decode.measure_ours(on_device(model), prompt, NEW, "compile", 1, model)
    assert result["tokens"] == tokens and result["max_rel_error"] < 1e-5, name
    assert result["launches_per_token"] > 0
