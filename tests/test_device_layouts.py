"""Operators on channels-last and other non-contiguous inputs that torch's ModuleInfo and
OpInfo checks found refused (tests/torch_suites): group norm's forward, torch's composition,
views its input and refused a channels-last one; the device runs it on a contiguous copy. And
results laid out as torch's meta functions lay them out, which compiled graphs assert (sort,
topk), and 16-bit out= tensors resized when their operator runs on float32 copies. Against
torch on the CPU, natively (OCLF_FALLBACK=error)."""
import pytest
import torch

from device_checks import check, randn


@pytest.fixture(autouse=True)
def _native(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


@pytest.mark.parametrize("shape, groups, layout", [((2, 6, 5, 7), 3, torch.channels_last),
                                                   ((1, 4, 3, 3, 5), 2, torch.channels_last_3d),
                                                   ((3, 6, 9), 2, None)])
def test_group_norm_of_a_non_contiguous_input(shape, groups, layout):
    x = randn(*shape)
    x = x.to(memory_format=layout) if layout is not None else x.transpose(0, 1).contiguous().transpose(0, 1)
    assert not x.is_contiguous()
    w, b = randn(shape[1], seed=1), randn(shape[1], seed=2)
    check(lambda x, w, b: torch.nn.functional.group_norm(x, groups, w, b), x, w, b)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_and_topk_results_are_laid_out_as_torchs(dim):
    """A compiled graph is planned with torch's meta functions' layouts (sort: the input's,
    topk: contiguous) and asserts them: the device's results keep them."""
    for x in (randn(5, 6, 7), randn(7, 6, 5).transpose(0, 2)):
        d = x.to("opencl")
        for fn in (lambda t: torch.sort(t, dim), lambda t: torch.sort(t, dim=dim, descending=True, stable=True),
                   lambda t: (torch.argsort(t, dim),), lambda t: torch.topk(t, 3, dim)):
            got, expected = fn(d), fn(x)
            assert [g.stride() for g in got] == [e.stride() for e in expected]
            for g, e in zip(got, expected):
                assert torch.equal(g.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_out_of_size_0_is_resized_every_call(dtype):
    """16-bit tensors through an operator's float32 kernel (the dtype wrapper's widened route):
    an out= the operator resizes is resized, on the first call and once the route is learned."""
    for _ in range(3):
        got = torch.arange(2, -3, -1, dtype=dtype, device="opencl")
        assert torch.equal(got.cpu(), torch.arange(2, -3, -1, dtype=dtype))
        out = torch.empty(0, dtype=dtype, device="opencl")
        torch.arange(0, 7, 2, out=out)
        assert torch.equal(out.cpu(), torch.arange(0, 7, 2, dtype=dtype))
