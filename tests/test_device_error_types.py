"""Invalid calls raise on the opencl device the exception type torch raises on the CPU (what
op_db's error inputs check, tests/torch_suites/test_ops_common.py test_errors): reductions
over zero-size dimensions or 65 dimensions, mean of integers, out= of another dtype or sharing
memory with an input, gather's and scatter's indices out of range, index_select's and
masked_select's out= (native), negating booleans, layer norm's shapes, margin losses' float
targets, 3-D pooling of empty channels, random fills of a negative spread or a reversed range,
rolling a 0-d tensor, the norm of integers (and complex norms computed, not refused)."""
import pytest
import torch


def _empty_out_aliasing_input(device):
    x = torch.zeros(0, device=device)
    return torch.cat([x, torch.ones(4, 6, device=device)], 0, out=x)


def _gather_into_its_input(device):
    src = torch.arange(6.0, device=device)
    return torch.gather(src, 0, torch.tensor([2, 1, 0], device=device), out=src[:3])


def _index_select_into_its_input(device):
    src = torch.arange(12.0, device=device).view(3, 4)
    return torch.index_select(src, 0, torch.tensor([0, 1], device=device), out=src[:2])


def _gather_resized_over_its_index(device):
    index = torch.tensor([2, 1, 0], device=device)
    return torch.gather(index.clone(), 0, index[1:], out=index[:1])


def _masked_select_into(which):
    def call(device):
        y = torch.rand(6, device=device)
        mask = torch.tensor([True, False, True, True, False, False], device=device)
        if which == "mask":
            return torch.masked_select(mask.clone(), mask, out=mask)
        out = {"input": y, "expanded": torch.zeros(1, device=device).expand(3),
               "float64": torch.empty(3, dtype=torch.float64, device=device)}[which]
        return torch.masked_select(y, mask, out=out)
    return call


CASES = {
    "amax over a zero-size dim": lambda d: torch.amax(torch.empty(5, 0, 5, device=d), 1),
    "max of an empty tensor": lambda d: torch.max(torch.empty(0, device=d)),
    "argmax over a zero-size dim": lambda d: torch.argmax(torch.empty(3, 0, device=d), 1),
    "amax of 65 dims": lambda d: torch.amax(torch.ones([1] * 65, device=d), 0),
    "amax into an int32 out": lambda d: torch.amax(torch.ones(4, 5, device=d), 0,
                                                   out=torch.empty(5, dtype=torch.int32, device=d)),
    "mean of integers": lambda d: torch.mean(torch.ones(3, 4, dtype=torch.long, device=d)),
    "mean into an integer dtype": lambda d: torch.mean(torch.ones(3, 4, device=d), dtype=torch.long),
    "gather into a float64 out": lambda d: torch.gather(torch.ones(2, 2, device=d), 1,
                                                        torch.zeros(2, 2, dtype=torch.long, device=d),
                                                        out=torch.empty(2, 2, dtype=torch.float64, device=d)),
    "gather into its input": _gather_into_its_input,
    "gather into an out= resized over its index": _gather_resized_over_its_index,
    "gather out of range": lambda d: torch.gather(torch.ones(2, 2, device=d), 1, torch.tensor([[0, 5], [1, 0]],
                                                                                             device=d)),
    "scatter out of range": lambda d: torch.ones(2, 2, device=d).scatter(1, torch.tensor([[0, 5]], device=d), 2.0),
    "cat into its empty input": _empty_out_aliasing_input,
    "index_select into its input": _index_select_into_its_input,
    "masked_select into its input": _masked_select_into("input"),
    "masked_select into its mask": _masked_select_into("mask"),
    "masked_select into an expanded out": _masked_select_into("expanded"),
    "masked_select into a float64 out": _masked_select_into("float64"),
    "neg of booleans": lambda d: torch.neg(torch.ones(3, dtype=torch.bool, device=d)),
    "layer_norm of an empty normalized shape": lambda d: torch.native_layer_norm(torch.ones(2, 3, device=d), [],
                                                                                   None, None, 1e-5),
    "layer_norm with a weight of another shape": lambda d: torch.nn.functional.layer_norm(
        torch.ones(2, 3, device=d), [3], weight=torch.ones(4, device=d)),
    "multi_margin_loss with float targets": lambda d: torch.nn.functional.multi_margin_loss(
        torch.ones(2, 3, device=d), torch.zeros(2, device=d)),
    "max_pool3d of zero channels": lambda d: torch.nn.functional.max_pool3d(torch.ones(1, 0, 4, 4, 4, device=d), 2),
    "normal_ with a negative std": lambda d: torch.empty(3, device=d).normal_(0.0, -1.0),
    "uniform_ over a reversed range": lambda d: torch.empty(3, device=d).uniform_(2.0, 1.0),
    "roll of a 0-d tensor over a dim": lambda d: torch.roll(torch.tensor(1.0, device=d), 1, 0),
    "vector_norm of integers": lambda d: torch.linalg.vector_norm(torch.ones(3, dtype=torch.long, device=d)),
}


def _raised(call, device):
    try:
        call(device)
        if device != "cpu":
            torch.opencl.synchronize()  # index checks raise at the next wait
    except Exception as error:  # noqa: BLE001  (the type is what is compared)
        return error
    return None


# Cases whose exception type changed between torch releases: the device raises the one of the
# release it is built for (torch 2.14: NotImplementedError for negated booleans, 2.11 RuntimeError).
SINCE_2_14 = {"neg of booleans"}


@pytest.mark.parametrize("name", list(CASES))
def test_the_device_raises_torchs_exception_type(opencl_device, name):
    if name in SINCE_2_14 and torch.__version__ < "2.14":
        pytest.skip(f"torch {torch.__version__} raises another type here than the 2.14 the device follows")
    expected = _raised(CASES[name], "cpu")
    assert expected is not None, f"{name}: the CPU raises nothing"
    got = _raised(CASES[name], "opencl")
    assert got is not None, f"{name}: the device raises nothing, the CPU {type(expected).__name__}: {expected}"
    assert type(got) is type(expected), f"{name}: the device raises {type(got).__name__} ({got}), " \
                                        f"the CPU {type(expected).__name__} ({expected})"


def test_complex_norms_are_computed_not_refused(opencl_device, monkeypatch):
    """A complex input's norm runs on the CPU (the registration's route for dtypes without a
    kernel), as torch computes it; it was refused as if it were an integer one."""
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    z = torch.tensor([[3 + 4j, 1 - 2j], [0.5j, -2 + 0j]], dtype=torch.complex64)
    for ord_ in (2, 1, float("inf")):
        expected = torch.linalg.vector_norm(z, ord_, dim=1)
        got = torch.linalg.vector_norm(z.to("opencl"), ord_, dim=1)
        assert got.device.type == "opencl" and got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected)
