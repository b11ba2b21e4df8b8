"""torch.compile's group kernels on the opencl device (compile/kernel.py: one work-group per
row, its work-items reducing together, work-item 0 storing the row's values) where the kernel
reads a buffer it also writes: a decoding step's own bookkeeping, which picks its token
(argmax), writes it at the step's index and moves the index on, all in place and in one kernel.
Every work-item reads the index; before the barrier fencing work-item 0's stores, the others
could read it already moved on (the index check then raised at the last step, on PoCL at
every run)."""
import pytest
import torch


@pytest.fixture
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    import torch._dynamo

    torch._dynamo.reset()
    yield opencl_device
    torch._dynamo.reset()
    from torch_opencl.compile import runtime

    runtime.release_recordings()


@pytest.mark.parametrize("width", [311, 1000])
def test_a_step_that_moves_its_own_index_on(device, width):
    torch.manual_seed(0)
    steps = 5
    scores = torch.randn(steps, width)
    tokens = torch.full((steps,), -1, dtype=torch.long, device="opencl")
    kept = torch.zeros(steps, width, device="opencl")
    index = torch.zeros(1, dtype=torch.long, device="opencl")
    rows = scores.to("opencl")

    def step():
        row = rows[index].view(-1) * 2
        tokens.index_copy_(0, index, row.argmax().view(1))
        kept.index_copy_(0, index, row.view(1, -1))
        index.add_(1)

    compiled = torch.compile(step)
    for _ in range(steps):  # the first call runs as written, the second records, the rest replay
        compiled()
    torch.opencl.synchronize()  # an index read out of range would raise here
    assert tokens.cpu().tolist() == scores.argmax(1).tolist()
    torch.testing.assert_close(kept.cpu(), scores * 2)
    assert index.item() == steps
