"""Operators run through the CPU fallback see the memory their arguments share as the CPU sees
it (csrc/aten/fallback_run.cpp): an out= over its own input, over another operand or over
itself (an expanded view) raises torch's "unsupported operation" where the CPU raises it,
and where the CPU computes with the overlap the device gives the CPU's values. Copied to the
host one by one, each argument read an unchanged copy and the last one copied back won: the
answers were silently other than torch's (kthvalue, take, put_, linalg.cross into an input)."""
import pytest
import torch


def _kthvalue_into_its_input(d):
    t = torch.arange(10.0, device=d)
    return torch.kthvalue(t, 5, out=(t, torch.empty((), dtype=torch.long, device=d)))


def _take_into_its_input(d):
    src = torch.arange(6.0, device=d)
    return torch.take(src, torch.tensor([2, 1, 0], device=d), out=src[:3])


def _take_over_its_index(d):
    index = torch.tensor([2, 1, 0], device=d)
    return torch.take(index.clone(), index[1:], out=index[:-1])


def _take_into_an_expanded_out(d):
    return torch.take(torch.arange(6.0, device=d), torch.tensor([2, 1, 0], device=d),
                      out=torch.zeros(1, device=d).expand(3))


def _put_from_its_own_elements(d):
    x = torch.arange(8.0, device=d)
    return x.put_(torch.tensor([1, 2, 3], device=d), x[:3])


def _cross_into_its_input(d):
    a = torch.arange(1.0, 7.0, device=d).view(2, 3)
    return torch.linalg.cross(a, torch.full((2, 3), 2.0, device=d), out=a)


def _cumprod_shifted_over_its_input(d):
    x = torch.arange(1.0, 13.0, device=d)
    return torch.cumprod(x[:-1], 0, out=x[1:])


def _index_put_through_its_own_memory(d):
    """An index (in a list argument) reading the complex tensor's own bytes as int64."""
    x = torch.zeros(4, dtype=torch.complex64, device=d)
    return x.index_put_((x.view(torch.int64)[:2],), torch.ones(2, dtype=torch.complex64, device=d))


RAISING = {
    "kthvalue into its input": _kthvalue_into_its_input,
    "take into its input": _take_into_its_input,
    "take over its index": _take_over_its_index,
    "take into an expanded out=": _take_into_an_expanded_out,
    "put_ from its own elements": _put_from_its_own_elements,
    "linalg.cross into its input": _cross_into_its_input,
    "cumprod shifted over its input": _cumprod_shifted_over_its_input,
    "index_put_ through its own memory": _index_put_through_its_own_memory,
}


@pytest.fixture
def fallback_silent(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    return opencl_device


def _raised(call, device):
    try:
        call(device)
        if device != "cpu":
            torch.opencl.synchronize()
    except Exception as error:  # noqa: BLE001  (type and words are compared)
        return error
    return None


@pytest.mark.parametrize("name", list(RAISING))
def test_an_overlap_the_cpu_refuses_is_refused(fallback_silent, name):
    expected = _raised(RAISING[name], "cpu")
    assert expected is not None and "unsupported operation" in str(expected), f"{name}: the CPU: {expected!r}"
    got = _raised(RAISING[name], "opencl")
    assert got is not None, f"{name}: the device raises nothing, the CPU {type(expected).__name__}: {expected}"
    assert type(got) is type(expected) and str(got).split(".")[0] == str(expected).split(".")[0], \
        f"{name}: the device raises {type(got).__name__} ({got}), the CPU {type(expected).__name__} ({expected})"


def _frexp_into_overlapping_outs(d):
    """Mantissas into buf[0:4] and exponents into the next four words: the CPU writes each
    element's pair in turn, so each exponent but the last is overwritten by the next mantissa."""
    buf = torch.zeros(5, device=d)
    torch.frexp(torch.tensor([3.0, 1.0, 4.0, 0.1], device=d), out=(buf[0:4], buf[1:5].view(torch.int32)))
    return buf.view(torch.int32)


def _cumprod_into_its_input(d):
    x = torch.arange(1.0, 13.0, device=d)
    torch.cumprod(x, 0, out=x)
    return x


def _cummin_values_beside_a_view(d):
    buf = torch.zeros(5, device=d)
    torch.cummin(torch.tensor([3.0, 1.0, 4.0, 0.1], device=d), 0,
                 out=(buf[1:], torch.zeros(4, dtype=torch.long, device=d)))
    return buf


def _index_fill_from_its_own_element(d):
    x = torch.arange(6.0, device=d)
    return x.index_fill_(0, torch.tensor([0, 2], device=d), x[5])


COMPUTED = {
    "frexp into overlapping outs": _frexp_into_overlapping_outs,
    "cumprod into its input": _cumprod_into_its_input,
    "cummin into a view of a wider buffer": _cummin_values_beside_a_view,
    "index_fill_ with a value from its own elements": _index_fill_from_its_own_element,
}


@pytest.mark.parametrize("name", list(COMPUTED))
def test_an_overlap_the_cpu_computes_gives_the_cpus_values(fallback_silent, name):
    expected = COMPUTED[name]("cpu")
    got = COMPUTED[name]("opencl")
    assert got.device.type == "opencl"
    assert torch.equal(got.cpu(), expected), f"{name}: the device gives {got.cpu().tolist()}, " \
                                             f"the CPU {expected.tolist()}"

