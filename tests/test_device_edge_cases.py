"""Inputs at the edges of what the opencl device's kernels assume, one test per class: 0-d
tensors, empty tensors, expanded and overlapping outputs, out-of-range indices, shapes that
do not fit, odd arguments. Each is served as torch serves it on the CPU, or refused with a
Python exception naming the op; never a crash. Found by the OpInfo run (extras/validation/opdb.py)."""
import pytest
import torch
import torch.nn.functional as F

ATOL, RTOL = 1e-5, 1e-5


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def close(got, ref):
    got = got.cpu()
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
    torch.testing.assert_close(got, ref, atol=ATOL, rtol=RTOL, equal_nan=True)


# ---- 0-d tensors: a reduction over dim 0 (or -1) of a scalar is the scalar ----------------------

ZERO_D_REDUCTIONS = [
    lambda x: x.sum(0), lambda x: x.sum(0, keepdim=True), lambda x: x.sum(-1), lambda x: x.mean(0, keepdim=True),
    lambda x: x.amax(0), lambda x: x.amin(-1, keepdim=True), lambda x: x.argmax(0), lambda x: x.argmin(0, True),
    lambda x: x.max(0).values, lambda x: x.max(0).indices, lambda x: x.min(0, keepdim=True).values,
    lambda x: x.prod(0), lambda x: x.all(0), lambda x: x.any(0), lambda x: torch.linalg.vector_norm(x, dim=0),
    lambda x: x.sum([]), lambda x: x.amax([]),
]


@pytest.mark.parametrize("fn", ZERO_D_REDUCTIONS)
def test_reductions_of_a_0d_tensor(fn):
    x = torch.tensor(-1.5)
    close(fn(x.to("opencl")), fn(x))


@pytest.mark.parametrize("dims", [(1,), (0, 0), (-2,)])
def test_reduction_dims_out_of_range_or_repeated_are_python_errors(dims):
    x = torch.tensor(2.0, device="opencl")
    with pytest.raises((IndexError, RuntimeError), match="out of range|multiple times"):
        x.sum(dims)
    with pytest.raises((IndexError, RuntimeError), match="out of range|multiple times"):
        torch.ones(3, 4, device="opencl").amax(dims + (5,))


def test_gather_and_scatter_of_0d_tensors():
    x, i = torch.tensor(3.0), torch.tensor(0)
    close(torch.gather(x.to("opencl"), 0, i.to("opencl")), torch.gather(x, 0, i))
    src = torch.tensor(7.0)
    close(x.to("opencl").scatter(0, i.to("opencl"), src.to("opencl")), x.scatter(0, i, src))


@pytest.mark.parametrize("keep", [True, False])
def test_masked_select_of_0d_tensors(keep):
    # One element or none, 1-D (cross_entropy with label smoothing on an unbatched input).
    x, mask = torch.tensor(3.5), torch.tensor(keep)
    close(torch.masked_select(x.to("opencl"), mask.to("opencl")), torch.masked_select(x, mask))
    y = torch.ones(2, 3)
    close(torch.masked_select(y.to("opencl"), mask.to("opencl")), torch.masked_select(y, mask))


# ---- empty tensors: nothing to launch ----------------------------------------------------------

EMPTY = [
    lambda x: F.avg_pool2d(x, 2), lambda x: F.max_pool2d(x, 2), lambda x: F.adaptive_avg_pool2d(x, 1),
    lambda x: F.max_pool3d(x.unsqueeze(2), 1), lambda x: F.adaptive_max_pool2d(x, 2),
    lambda x: F.conv_transpose2d(x, torch.ones(x.shape[1], 2, 3, 3, device=x.device)),
    lambda x: x.sum(1), lambda x: x.softmax(1), lambda x: x.cumsum(1), lambda x: x.flip(1), lambda x: x + 1,
    lambda x: torch.cat([x, x], 0),
]


@pytest.mark.parametrize("fn", EMPTY)
def test_ops_on_a_batch_of_none(fn):
    x = torch.randn(0, 3, 4, 4)
    close(fn(x.to("opencl")), fn(x))


def test_cat_with_empty_and_legacy_empty_tensors():
    a, e = torch.randn(2, 3), torch.tensor([])
    close(torch.cat([e.to("opencl"), a.to("opencl"), e.to("opencl")]), torch.cat([e, a, e]))
    close(torch.cat([e.to("opencl"), e.to("opencl")]), torch.cat([e, e]))
    close(torch.cat([a.to("opencl")[:0], a.to("opencl")], 0), torch.cat([a[:0], a], 0))


# ---- shapes that do not fit: a Python error, never a read past a tensor ------------------------

def test_cat_refuses_mismatched_shapes_and_scalars():
    a = torch.ones(2, 3, device="opencl")
    with pytest.raises(RuntimeError, match="cat: sizes of tensors must match"):
        torch.cat([a, torch.ones(2, 2, device="opencl")], 0)
    with pytest.raises(RuntimeError, match="cat: tensors must have the same number of dimensions"):
        torch.cat([a, torch.ones(2, 3, 1, device="opencl")], 0)
    with pytest.raises(RuntimeError, match="zero-dimensional"):
        torch.cat([torch.tensor(1.0, device="opencl")])


def test_gather_and_scatter_refuse_an_index_larger_than_self():
    x = torch.ones(2, 3, device="opencl")
    big = torch.zeros(3, 3, dtype=torch.long, device="opencl")
    with pytest.raises(RuntimeError, match="gather: index of shape"):
        torch.gather(x, 1, big)
    with pytest.raises(RuntimeError, match="scatter: index of shape"):
        x.scatter(1, big, 1.0)


@pytest.mark.parametrize("call, error", [
    (lambda x, i: x.index_select(0, i), IndexError),
    # torch's type for these three: a RuntimeError
    (lambda x, i: torch.gather(x, 0, i.view(-1, 1).expand(-1, 3)), RuntimeError),
    (lambda x, i: x.scatter(0, i.view(-1, 1).expand(-1, 3), 1.0), RuntimeError),
    (lambda x, i: x.index_add(0, i, torch.ones(i.numel(), 3, device="opencl")), RuntimeError),
    (lambda x, i: x[i], IndexError),
    (lambda x, i: x.index_put_((i,), torch.tensor(1.0, device="opencl")), IndexError),
    (lambda x, i: F.embedding(i, x), IndexError),
    (lambda x, i: x.index_copy_(0, i, torch.ones(i.numel(), 3, device="opencl")), IndexError),
])
@pytest.mark.parametrize("bad", [4, -5, 1 << 40])
def test_out_of_range_indices_are_index_errors(call, error, bad):
    x = torch.randn(4, 3, device="opencl")
    i = torch.tensor([0, bad], device="opencl")
    with pytest.raises(error, match="out of bounds|out of range"):
        call(x, i)
        torch.opencl.synchronize()  # checked on the device: raised at the next wait
    # found once, then cleared: the device goes on
    assert torch.equal(x.index_select(0, torch.tensor([3, 0], device="opencl")).cpu(), x.cpu()[[3, 0]])


def test_negative_indices_count_from_the_end_where_torch_allows_them():
    x = torch.randn(5, 3)
    i = torch.tensor([-1, 0, -5])
    close(x.to("opencl")[i.to("opencl")], x[i])
    ref, got = x.clone(), x.to("opencl")
    ref[i] = 2.0
    got[i.to("opencl")] = 2.0
    close(got, ref)


# ---- outputs that share memory: refused, as torch refuses them ---------------------------------

def test_elementwise_refuses_an_expanded_or_partly_overlapping_output():
    a = torch.randn(4, 4, device="opencl")
    with pytest.raises(RuntimeError, match="add: the output has elements that share memory"):
        torch.add(a, 1, out=torch.zeros(4, device="opencl").expand(4, 4))
    flat = a.clone().view(-1)
    with pytest.raises(RuntimeError, match="mul: the output partly overlaps an input"):
        torch.mul(flat[:12], 2, out=flat[4:])
    b = a.clone()
    b.mul_(2)  # the output is the input itself: in place, allowed
    close(b, a.cpu() * 2)


def test_elementwise_reads_a_strided_view_of_its_output_before_writing():
    a = torch.randn(5, 6)
    ref, got = a.clone(), a.to("opencl")
    torch.mul(ref[:, :5].clone(), 2, out=ref[:, 1:])  # every input element read before any is written
    torch.mul(got[:, :5], 2, out=got[:, 1:])
    close(got, ref)
    square = a[:5, :5].to("opencl")
    with pytest.raises(RuntimeError, match="add: the output partly overlaps an input"):
        square.add_(square.t())  # as torch on the CPU


def test_cat_refuses_an_out_that_is_one_of_its_inputs():
    a = torch.randn(2, 3, device="opencl")
    buffer = torch.zeros(4, 3, device="opencl")
    with pytest.raises(RuntimeError, match="cat: out overlaps"):
        torch.cat([buffer[:2], a], 0, out=buffer)


# ---- arguments -------------------------------------------------------------------------------

@pytest.mark.parametrize("divisor", [-2, 3, None])
def test_avg_pool2d_divisor_override_of_any_sign(divisor):
    x = torch.randn(1, 1, 4, 4)
    close(F.avg_pool2d(x.to("opencl"), 2, divisor_override=divisor), F.avg_pool2d(x, 2, divisor_override=divisor))


# ---- values at the edges of a kernel's arithmetic -----------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x: x.all(), lambda x: x.all(1), lambda x: x.any(0), lambda x: x.any(),
    lambda x: torch.linalg.vector_norm(x, 0), lambda x: torch.linalg.vector_norm(x, 0, dim=1),
    lambda x: x[:, :0].mean(1), lambda x: x[:0].mean(),
])
def test_truth_counts_and_means_of_nothing(fn):
    x = torch.tensor([[0.5, -0.25, float("nan")], [0.0, 3.0, 0.125]])
    close(fn(x.to("opencl")), fn(x))


@pytest.mark.parametrize("steps", [0, 1, 2, 7])
def test_linspace_of_few_steps(steps):
    close(torch.linspace(1, 3, steps, device="opencl"), torch.linspace(1, 3, steps))


# ---- torch's lazy views: conjugate and negative bits --------------------------------------------

def test_conjugate_and_negative_views_copy_back_resolved(monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")  # complex numbers have no OpenCL kernels
    c = torch.randn(5, 6, dtype=torch.complex64)
    d = c.to("opencl")
    close(d.conj().cpu(), c.conj().resolve_conj())
    close(d.conj().clone().cpu(), c.conj().resolve_conj())
    close(d._neg_view().cpu(), -c)
    close(d[1:, ::2].cpu(), c[1:, ::2])  # strided, of a dtype without kernels: read back as its span
    close(d[1:, ::2].conj().contiguous().cpu(), c[1:, ::2].conj().resolve_conj())
    x = torch.randn(5, 6, 7)
    close(torch.fft.hfft(x.to("opencl"), n=7), torch.fft.hfft(x, n=7))
    close(torch.fft.ihfftn(x.to("opencl"), s=(8,)), torch.fft.ihfftn(x, s=(8,)))  # a conjugate view


def test_index_add_into_a_0d_tensor():
    x, i, src = torch.tensor(1.5), torch.tensor([0]), torch.tensor(2.0)
    close(x.to("opencl").index_add(0, i.to("opencl"), src.to("opencl"), alpha=2), x.index_add(0, i, src, alpha=2))
    got = x.to("opencl")
    got.index_add_(0, i.to("opencl"), src.to("opencl"))
    close(got, x.clone().index_add_(0, i, src))


# ---- what the device keeps derived from a weight follows every write -----------------------------

def test_products_see_weights_written_through_data_and_views():
    """A weight's transposed or packed copy (derived.h) is made again after any write to its
    storage: through .data (whose version counter is not the parameter's, as
    word_language_model's SGD writes), a view, or copy_; not only after a version change."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(33, 17).to("opencl")
    ref = torch.nn.Linear(33, 17)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    x = torch.randn(5, 33)
    xd = x.to("opencl")
    close(lin(xd), ref(x))  # the first product makes the derived copies
    updates = [lambda p: p.data.add_(0.5), lambda p: p.data[:, :4].mul_(-2),
               lambda p: p.data.copy_(torch.randn(p.shape).to(p.device)), lambda p: p.view(-1)[:7].zero_()]
    for update in updates:
        with torch.no_grad():
            update(lin.weight)
        ref.weight.data.copy_(lin.weight.detach().cpu())
        close(lin(xd), ref(x))
    conv = torch.nn.Conv2d(3, 8, 3).to("opencl")
    img = torch.randn(2, 3, 9, 9)
    first = conv(img.to("opencl")).cpu()
    conv.weight.data.mul_(2)
    with torch.no_grad():
        expected = torch.nn.functional.conv2d(img, conv.weight.cpu(), conv.bias.cpu())
    close(conv(img.to("opencl")), expected)
    assert not torch.allclose(first, expected)


def test_copy_onto_itself_changes_nothing_and_partial_overlap_is_refused():
    x = torch.arange(12.0).reshape(3, 4).to("opencl")
    x.copy_(x.view(-1).view(3, 4))  # DistributedDataParallel's broadcast of a lone buffer
    x.copy_(x)
    close(x, torch.arange(12.0).reshape(3, 4))
    flat = torch.arange(10.0).to("opencl")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        flat[1:].copy_(flat[:-1])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_clamp_with_one_bound_and_wrapping_scalars(dtype):
    """clamp's missing bound stands in as ±infinity, which an integer kernel takes as its type's
    limit (converted as it was, +infinity made every int64 clamp(min=0) -2^63); finite numbers
    still wrap as torch's do (uint8 + (-1))."""
    y = torch.tensor([0, 2, 100, 7, 1]).to(dtype) - (0 if dtype == torch.uint8 else 50)
    d = y.to("opencl")
    for f in (lambda t: t.clamp(min=0), lambda t: t.clamp(max=3), lambda t: t.clamp(-5, 5),
              lambda t: t.clamp_min(1), lambda t: t.clamp_max(-1), lambda t: t + (-1)):
        assert torch.equal(f(d).cpu(), f(y)), (f(d).cpu(), f(y))
