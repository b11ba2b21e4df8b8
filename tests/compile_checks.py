"""What the torch.compile tests share (test_device_compile*.py): a fresh compile state per
test, what the compiled graphs did (counters, replays), and a comparison against a reference
scaled by its largest value (close)."""


def fresh_compile(opencl_device, monkeypatch):
    """A fixture's body: no CPU fallback, Dynamo's caches and the replay counters cleared
    before the test; the recordings and what they hold given back after it (later tests
    count memory)."""
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    import torch._dynamo

    torch._dynamo.reset()
    from torch_opencl.compile import runtime

    runtime.counters.clear()
    runtime.unrecordable_reasons.clear()
    yield opencl_device
    torch._dynamo.reset()
    runtime.release_recordings()
    torch.opencl.empty_cache()


def counters():
    from torch_opencl.compile import runtime

    return runtime.counters


def replays() -> str:
    """What the compiled graphs did, for a failed assertion: counts and why any went unrecorded."""
    from torch_opencl.compile import runtime

    return f"{dict(runtime.counters)}; unrecorded because: {list(runtime.unrecordable_reasons)}"


def close(out, ref, tol=1e-5):
    out, ref = out.detach().cpu().double(), ref.detach().cpu().double()
    scale = max(ref.abs().max().item(), 1.0)
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() <= tol * scale, (out - ref).abs().max().item()

