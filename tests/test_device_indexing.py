"""Advanced indexing on the opencl device against torch on the CPU, with OCLF_FALLBACK=error:
x[i, j] with several integer index tensors (broadcast, negative, adjacent or not), boolean masks,
index_put_ with and without accumulation (repeated positions), strided views, the backward of
indexing, nonzero, masked_select and isin, index_copy_ (a check and one copy); out-of-range
indices raise torch's exception: IndexError from indexing and index_select, RuntimeError from
gather and scatter."""
import pytest
import torch

D = "opencl"


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def dev(key):
    if isinstance(key, tuple):
        return tuple(dev(k) for k in key)
    return key.to(D) if isinstance(key, torch.Tensor) else key


torch.manual_seed(0)
X = torch.randn(5, 7, 3, 4)

KEYS = {
    "one index, negative": (torch.tensor([0, 4, -1, 4]),),
    "2-D index on dim 1": (slice(None), torch.tensor([[1, 6], [-7, 3]])),
    "two adjacent": (torch.tensor([1, 2, -5]), torch.tensor([3, 0, 6])),
    "broadcast, not adjacent": (torch.tensor([[1], [2]]), slice(None), torch.tensor([0, 2, 1])),
    "two in the middle": (slice(None), torch.tensor([1, 2, 0]), torch.tensor([2, 1, 0]), slice(None)),
    "int32 index, ellipsis": (Ellipsis, torch.tensor([3, 1], dtype=torch.int32)),
    "None and an int": (None, torch.tensor([1, 2]), 1),
    "bool mask, 1-D": (X[:, 0, 0, 0] > 0,),
    "bool mask, 2-D in the middle": (slice(None), X[0, :, :, 0] > 0),
    "bool mask and index": (torch.tensor([True, False, False, True, False]), slice(None), torch.tensor([2, 0])),
    "empty index": (torch.tensor([], dtype=torch.long),),
}


@pytest.mark.parametrize("name", KEYS)
def test_getitem(name):
    key = KEYS[name]
    ref = X[key]
    got = X.to(D)[dev(key)]
    assert got.device.type == D and got.shape == ref.shape
    assert torch.equal(got.cpu(), ref)
    # the same on a permuted (strided) view
    view = X.permute(2, 0, 3, 1).contiguous().to(D).permute(1, 3, 0, 2)
    assert not view.is_contiguous()
    assert torch.equal(view[dev(key)].cpu(), ref)


@pytest.mark.parametrize("name", KEYS)
def test_setitem_and_accumulate(name):
    key = KEYS[name]
    values = torch.randn(X[key].shape)
    ref = X.clone()
    ref[key] = values
    got = X.to(D)
    got[dev(key)] = values.to(D)
    index = [k for k in key if isinstance(k, torch.Tensor) and k.dtype != torch.bool]
    repeated = any(k.numel() != k.unique().numel() for k in index)
    if not repeated:  # with repeated positions, which value lands is unspecified (as in torch)
        assert torch.equal(got.cpu(), ref)
    tensors = [k for k in key if isinstance(k, torch.Tensor)]
    if len(tensors) == len(key):  # index_put_ takes index tensors only
        ref = X.clone().index_put_(key, values, accumulate=True)
        got = X.to(D).index_put_(dev(key), values.to(D), accumulate=True)
        torch.testing.assert_close(got.cpu(), ref, atol=1e-6, rtol=1e-6)


def test_accumulate_repeated_positions_and_broadcast_values():
    i = torch.tensor([1, 1, 3, 1, -4])
    ref = torch.zeros(5, 6).index_put_((i,), torch.arange(6.0), accumulate=True)
    got = torch.zeros(5, 6).to(D).index_put_((i.to(D),), torch.arange(6.0).to(D), accumulate=True)
    assert torch.equal(got.cpu(), ref)
    j = torch.tensor([0, 0, 5, 0, 5])
    ref = torch.zeros(5, 6, dtype=torch.long).index_put_((i, j), torch.tensor(3), accumulate=True)
    got = torch.zeros(5, 6, dtype=torch.long).to(D).index_put_((i.to(D), j.to(D)), torch.tensor(3), accumulate=True)
    assert torch.equal(got.cpu(), ref)


def test_put_into_a_strided_view():
    base = torch.zeros(6, 9)
    base_d = base.to(D)
    i = torch.tensor([4, 0, 2])
    base[:, ::2][i] = 1.5
    view = base_d[:, ::2]
    view[i.to(D)] = 1.5
    assert torch.equal(base_d.cpu(), base)


def test_backward_of_indexing():
    a = torch.randn(6, 4, 3, requires_grad=True)
    ad = a.detach().to(D).requires_grad_()
    i = torch.tensor([[0, 2, 2], [5, 0, 1]])
    (a[i, 1:, torch.tensor([2, 0, 2])] ** 2).sum().backward()
    (ad[i.to(D), 1:, torch.tensor([2, 0, 2]).to(D)] ** 2).sum().backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.uint8])
def test_nonzero(dtype):
    x = (torch.randn(3, 1, 5, 7) > 0.3).to(dtype)
    for t in (x, x[:, :, 1:, ::2], x[0, 0, 0], torch.zeros(4, dtype=dtype), torch.ones((), dtype=dtype)):
        assert torch.equal(t.to(D).nonzero().cpu(), t.nonzero())
    assert torch.equal(torch.argwhere(x.to(D)).cpu(), torch.argwhere(x))


def test_masked_select_broadcasts():
    x, mask = torch.randn(4, 7), torch.randn(7) > 0
    assert torch.equal(torch.masked_select(x.to(D), mask.to(D)).cpu(), torch.masked_select(x, mask))


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    elements = torch.randint(0, 20, (3, 33))
    test = torch.tensor([[3, 19], [7, 7], [0, 25]])
    ref = torch.isin(elements, test, invert=invert)
    assert torch.equal(torch.isin(elements.to(D), test.to(D), invert=invert).cpu(), ref)
    # type promotion: long elements against float tests, a number on either side
    assert torch.equal(torch.isin(elements.to(D), torch.tensor([3.0, 4.5]).to(D)).cpu(),
                       torch.isin(elements, torch.tensor([3.0, 4.5])))
    assert torch.equal(torch.isin(elements.to(D), 7, invert=invert).cpu(), torch.isin(elements, 7, invert=invert))
    assert torch.equal(torch.isin(7, test.to(D)).cpu(), torch.isin(7, test))
    assert torch.equal(torch.isin(elements.to(D), test[:0].to(D)).cpu(), torch.isin(elements, test[:0]))


def test_out_of_range_index_raises():
    x = X.to(D)
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 1 with size 7"):
        x[:, torch.tensor([0, 7]).to(D)].cpu()
    with pytest.raises(IndexError, match="index -6 is out of bounds for dimension 0 with size 5"):
        x[torch.tensor([-6]).to(D)] = 1.0
        torch.opencl.synchronize()
    with pytest.raises(IndexError, match="shape of the mask"):
        x[torch.ones(4, dtype=torch.bool).to(D)]
    with pytest.raises(IndexError, match="could not be broadcast"):
        x[torch.tensor([0, 1]).to(D), torch.tensor([0, 1, 2]).to(D)]
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x[torch.tensor([0.0]).to(D)]


def test_index_checks_raise_at_the_next_wait_and_never_touch_memory_outside(monkeypatch):
    """Indices are checked on the device: the operator returns at once, an index out of range
    raises at the next wait for the device (a read or synchronize), naming the operator, the
    index and the dimension; meanwhile no kernel reads or writes outside its tensors (a
    scatter's neighbour keeps its values). With OCLF_DEVICE_INDEX_CHECKS=call the check
    waits at the call instead."""
    store = torch.arange(12.0).to(D)
    x, neighbour = store[:6].view(2, 3), store[6:]
    bad = torch.tensor([[0, 5, 1]]).to(D)
    x.scatter_(0, bad, -1.0)  # row 5 of a 2-row tensor: skipped
    y = x.index_select(0, torch.tensor([1, 9]).to(D))  # returns: nothing waited for
    with pytest.raises(RuntimeError, match=r"opencl: scatter: index 5 is out of bounds for a dimension of size 2 "
                                         r"\(checked on the device, raised at the first wait"):
        y.cpu()
    # the first one found is raised, then the record is cleared and the device goes on
    torch.opencl.synchronize()
    assert torch.equal(neighbour.cpu(), torch.arange(6.0, 12.0))
    assert torch.equal(x.index_select(0, torch.tensor([1, 0]).to(D)).cpu(), x.cpu()[[1, 0]])
    # int32 indices, checked alike
    with pytest.raises(IndexError, match="index_select: index -1 is out of bounds"):
        x.index_select(0, torch.tensor([0, -1], dtype=torch.int32).to(D))
        torch.opencl.synchronize()
    monkeypatch.setenv("OCLF_DEVICE_INDEX_CHECKS", "call")
    with pytest.raises(RuntimeError, match=r"gather: index 2 is out of bounds for a dimension of size 2$"):
        torch.gather(x, 0, torch.tensor([[2, 0, 0]]).to(D))
    monkeypatch.setenv("OCLF_DEVICE_INDEX_CHECKS", "later")
    with pytest.raises(RuntimeError, match="OCLF_DEVICE_INDEX_CHECKS must be 'device' or 'call'"):
        x.index_select(0, torch.tensor([0]).to(D))
    monkeypatch.delenv("OCLF_DEVICE_INDEX_CHECKS")
    torch.opencl.synchronize()


def test_a_replayed_step_checks_its_indices_too():
    """A recorded graph keeps its check kernels: an index out of range written into its input
    before a replay raises at the next wait, as in an eager run."""
    from torch_opencl import graph, Graph
    table = torch.randn(5, 4).to(D)
    ids = torch.tensor([0, 3]).to(D)
    g = Graph()
    with graph(g):
        rows = table.index_select(0, ids)
    ids.copy_(torch.tensor([4, 1]))
    g.replay()
    assert torch.equal(rows.cpu(), table.cpu()[[4, 1]])
    ids.copy_(torch.tensor([2, 5]))
    g.replay()
    with pytest.raises(IndexError, match="index_select: index 5 is out of bounds"):
        torch.opencl.synchronize()
    torch.opencl.synchronize()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_index_copy_is_a_check_and_one_copy(dtype):
    # a key/value cache's new row (transformers' StaticCache): the index checked, the rows
    # copied as bits, two launches, in the cache's own dtype; a strided cache and source too
    from opencl_functions import devices

    cache, src = (torch.randn(1, 4, 13, 16) * 10).to(dtype), (torch.randn(1, 4, 2, 16) * 10).to(dtype)
    pos = torch.tensor([7, 2])
    for view in (lambda t: t, lambda t: t.transpose(1, 3)):
        ours = view(cache.to("opencl"))
        devices.launch_log_start()
        try:
            ours.index_copy_(2, pos.to("opencl"), view(src).to("opencl"))
            kernels = [launch["kernel"] for launch in devices.launch_log_take()]
        finally:
            devices.launch_log_stop()
        assert torch.equal(ours.cpu(), view(cache).clone().index_copy_(2, pos, view(src)))
        if view(cache).is_contiguous():
            assert kernels == ["index_check", "scatter"], kernels
    assert torch.equal(cache.to("opencl").index_copy(2, pos.to("opencl"), src.to("opencl")).cpu(),
                       cache.index_copy(2, pos, src))
