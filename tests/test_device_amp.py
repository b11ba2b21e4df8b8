"""Mixed precision on the opencl device (torch_opencl/amp.py, csrc/aten/autocast.cpp,
csrc/aten/amp_scale.cpp, kernels/amp.cl):

- torch.autocast("opencl") in float16 and bfloat16 gives each operator the dtype CUDA's cast
  policy gives it (torch's AMP docs: products and convolutions in the 16-bit dtype, softmax,
  exp, pow, norms and losses in float32, ops of several inputs at the widest), with values
  as the 16-bit inputs' exact results rounded once;
- the gradient scaler's operators against torch's CPU kernels, bit for bit: inf and NaN found
  in any of many tensors of every floating dtype, unscaling, the scale's growth every
  growth_interval steps and its backoff; enqueued with nothing read back (they record into
  a graph, where a read from the device raises);
- a small CNN trained with autocast and GradScaler on the device follows the float64 loss
  curve as closely as torch's own mixed precision on the CPU does, through overflowing
  first steps that the scaler skips."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

HALVES = [torch.float16, torch.bfloat16]
EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


@pytest.fixture(autouse=True)
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")  # every operator here runs on the device
    return opencl_device


def d(t):
    return t.to("opencl")


# --- autocast ---------------------------------------------------------------------------

def test_autocast_is_available_with_cuda_defaults():
    assert torch.amp.is_autocast_available("opencl")
    assert torch.opencl.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.get_autocast_dtype("opencl") == torch.float16  # as CUDA's default
    assert not torch.is_autocast_enabled("opencl")
    with torch.autocast("opencl"):
        assert torch.is_autocast_enabled("opencl") and not torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("opencl") == torch.float16
    with torch.autocast("opencl", dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("opencl") == torch.bfloat16
    assert torch.get_autocast_dtype("opencl") == torch.float16 and not torch.is_autocast_enabled("opencl")


def test_autocast_refuses_other_dtypes_as_torch_does():
    with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
        with torch.autocast("opencl", dtype=torch.float32):
            assert not torch.is_autocast_enabled("opencl")


def rounded_product(f, *tensors, dtype):
    """f of the inputs rounded to dtype, computed in float64 and rounded once."""
    return f(*(t.to(dtype).double() for t in tensors)).to(dtype)


# Products and convolutions: (name, function, input shapes), awkward sizes.
LOWER = [
    ("linear", lambda x, w, b: F.linear(x, w, b), [(7, 33), (5, 33), (5,)]),
    ("matmul", lambda a, b: a @ b, [(3, 7, 33), (33, 5)]),
    ("mm", torch.mm, [(1, 33), (33, 7)]),
    ("addmm", torch.addmm, [(7,), (5, 33), (33, 7)]),
    ("bmm", torch.bmm, [(2, 7, 33), (2, 33, 5)]),
    ("baddbmm", torch.baddbmm, [(2, 7, 5), (2, 7, 33), (2, 33, 5)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 7, 9), (5, 3, 3, 3), (5,)]),
    ("conv1d", lambda x, w: F.conv1d(x, w, stride=2), [(2, 4, 33), (3, 4, 5)]),
]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name, f, shapes", LOWER, ids=[case[0] for case in LOWER])
def test_products_and_convolutions_run_in_the_autocast_dtype(name, f, shapes, dtype):
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(s, generator=gen) for s in shapes]
    with torch.autocast("opencl", dtype=dtype):
        got = f(*(d(t) for t in inputs))
    assert got.dtype == dtype, name
    want = rounded_product(f, *inputs, dtype=dtype)
    # float32 accumulation, then one rounding to the 16-bit dtype: within one unit of it
    torch.testing.assert_close(got.cpu().double(), want.double(), rtol=EPS[dtype], atol=EPS[dtype])
    with torch.autocast("opencl", dtype=dtype, enabled=False):
        assert f(*(d(t) for t in inputs)).dtype == torch.float32


def cross_entropy(h, h2):
    return F.cross_entropy(h, torch.arange(7, device=h.device))


def cross_entropy_in_16_bits(h, h2):
    """What CUDA's policy makes of cross_entropy: its log_softmax is given the logits' dtype
    explicitly, so it keeps it (fp32_set_opt_dtype casts only where no dtype is given), and
    nll_loss runs in float32 on the 16-bit log-probabilities."""
    return F.nll_loss(F.log_softmax(h, 1).to(h2.dtype).double(), torch.arange(7))


# Ops CUDA's policy runs in float32, given 16-bit inputs: (name, function of h and h2, and
# its float64 reference where that is not the function itself).
FP32 = [
    ("softmax", lambda h, h2: torch.softmax(h, -1), None),
    ("log_softmax", lambda h, h2: F.log_softmax(h, 1), None),
    ("exp", lambda h, h2: torch.exp(h), None),
    ("pow", lambda h, h2: h.pow(2), None),
    ("sum", lambda h, h2: h.sum(1), None),
    ("layer_norm", lambda h, h2: F.layer_norm(h, (33,)), None),
    ("mse_loss", lambda h, h2: F.mse_loss(h, h2), None),
    ("norm", lambda h, h2: h.norm(), None),
    ("cross_entropy", cross_entropy, cross_entropy_in_16_bits),
]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("name, f, reference", FP32, ids=[case[0] for case in FP32])
def test_precision_sensitive_ops_run_in_float32(name, f, reference, dtype):
    gen = torch.Generator().manual_seed(1)
    h, h2 = (torch.randn(7, 33, generator=gen).to(dtype) for _ in range(2))
    with torch.autocast("opencl", dtype=dtype):
        got = f(d(h), d(h2))
    assert got.dtype == torch.float32, name
    if reference is None:
        torch.testing.assert_close(got.cpu().double(), f(h.double(), h2.double()), rtol=1e-5, atol=1e-5)
    else:  # 16-bit intermediates: one of them may round the other way
        torch.testing.assert_close(got.cpu().double(), reference(h.double(), h2), rtol=EPS[dtype], atol=1e-5)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_several_inputs_promote_to_the_widest(dtype):
    gen = torch.Generator().manual_seed(2)
    x, h, h2 = torch.randn(7, 5, generator=gen), *(torch.randn(7, 5, generator=gen).to(dtype) for _ in range(2))
    cases = {
        "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), torch.float32),   # autocast's promote list
        "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1, value=2.0), torch.float32),
        "cat": (lambda a, b, c: torch.cat([b, a, c]), torch.float32),                     # promotes by itself
        "stack": (lambda a, b, c: torch.stack([b, a]), torch.float32),
        "cat of 16-bit": (lambda a, b, c: torch.cat([b, c], 1), dtype),
        "relu (listed nowhere)": (lambda a, b, c: torch.relu(b), dtype),                  # runs as given
    }
    with torch.autocast("opencl", dtype=dtype):
        for name, (f, want_dtype) in cases.items():
            got = f(d(x), d(h), d(h2))
            assert got.dtype == want_dtype, name
            torch.testing.assert_close(got.cpu(), f(x, h, h2), msg=name)


def test_binary_cross_entropy_is_refused_inside_autocast(monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")  # log_sigmoid (of ..._with_logits) runs on the CPU
    p, t = d(torch.rand(5)), d(torch.rand(5))
    with torch.autocast("opencl"):
        with pytest.raises(RuntimeError, match="unsafe to autocast.*binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)
        assert F.binary_cross_entropy_with_logits(p, t).dtype == torch.float32
    F.binary_cross_entropy(p, t)  # outside: as always


def test_autocast_backward_gives_float32_gradients_and_leaves_cpu_alone():
    model = nn.Sequential(nn.Linear(33, 7), nn.ReLU(), nn.Linear(7, 3)).to("opencl")
    x = d(torch.randn(5, 33))
    with torch.autocast("opencl"):
        out = model(x)
        cpu = torch.randn(3, 4) @ torch.randn(4, 2)            # the CPU's autocast is off
    assert out.dtype == torch.float16 and cpu.dtype == torch.float32
    out.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 and p.grad.device.type == "opencl" for p in model.parameters())


# --- the gradient scaler's operators ----------------------------------------------------

SIZES = [(1,), (7,), (33,), (5, 7), (1000,), (3, 1, 11), (2,), (64, 3), (13,), (4,), (9,)]  # 11: two launches


def grads(dtype, bad=None, seed=0):
    """Gradients of SIZES; `bad` = (tensor, flat index, value) puts an inf or NaN there."""
    gen = torch.Generator().manual_seed(seed)
    out = [(torch.randn(s, generator=gen, dtype=torch.float64) * 1000).to(dtype) for s in SIZES]
    if bad is not None:
        which, index, value = bad
        out[which].view(-1)[index] = value
    return out


def unscale_both(tensors, inv_scale, found=0.0):
    """torch's CPU kernel and the device's on copies: (cpu grads, found), (device grads, found)."""
    results = []
    for move in (lambda t: t.clone(), d):
        ts = [move(t) for t in tensors]
        found_inf = move(torch.tensor([found]))
        torch._amp_foreach_non_finite_check_and_unscale_(ts, found_inf, move(torch.tensor([inv_scale])))
        results.append(([t.cpu() for t in ts], found_inf.item()))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("bad", [None, (0, 0, float("inf")), (4, 999, float("nan")), (10, 3, float("-inf")),
                                 (3, 17, float("inf"))], ids=["finite", "inf first", "nan last", "-inf", "inf"])
@pytest.mark.parametrize("inv_scale", [1.0, 2.0**-13, 0.37], ids=["check only", "power of 2", "0.37"])
def test_unscale_and_inf_check_as_torch(dtype, bad, inv_scale, monkeypatch):
    if dtype == torch.float64:
        monkeypatch.setenv("OCLF_FALLBACK", "silent")  # the CPU's on devices without cl_khr_fp64
    (want, want_found), (got, got_found) = unscale_both(grads(dtype, bad), inv_scale)
    assert got_found == want_found == (0.0 if bad is None else 1.0)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def test_unscale_views_empty_tensors_mixed_dtypes_and_a_set_flag():
    base = torch.randn(6, 8) * 100
    tensors = [base.t(), base[:, ::3], torch.empty(0), torch.randn(5).half(), torch.randn(4, 2)]
    tensors[1][2, 1] = float("inf")                       # in the strided (not dense) view
    (want, want_found), (got, got_found) = unscale_both(tensors, 0.25)
    assert got_found == want_found == 1.0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    dev_base = d(base)
    view = dev_base[:, ::3]
    torch._amp_foreach_non_finite_check_and_unscale_([view], d(torch.zeros(1)), d(torch.tensor([0.5])))
    torch.testing.assert_close(dev_base.cpu()[:, 1::3], base[:, 1::3], rtol=0, atol=0)  # around the view
    _, (_, still_set) = unscale_both([torch.ones(3)], 0.5, found=1.0)                   # never reset
    assert still_set == 1.0


def test_unscale_takes_eight_tensors_per_launch(device):
    tensors = [d(t) for t in grads(torch.float32)]
    found_inf, inv_scale = d(torch.zeros(1)), d(torch.tensor([0.5]))
    torch.opencl.synchronize()
    before = device.memory_stats()["kernel_launches"]
    torch._amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale)
    assert device.memory_stats()["kernel_launches"] - before == 2


def update_both(found_infs, scale, growth_factor, backoff_factor, interval, tracker=0):
    """The scale and growth tracker after each step, by torch's CPU kernel and the device's."""
    results = []
    for move in (lambda t: t.clone(), d):
        s, g = move(torch.tensor([scale])), move(torch.tensor([tracker], dtype=torch.int32))
        seen = []
        for found in found_infs:
            torch._amp_update_scale_(s, g, move(torch.tensor([found])), growth_factor, backoff_factor, interval)
            seen.append((s.item(), g.item()))
        results.append(seen)
    return results


@pytest.mark.parametrize("growth, backoff", [(2.0, 0.5), (1.7, 0.3)])
def test_scale_grows_and_backs_off_as_torch(growth, backoff):
    # growth after 3 clean steps, a backoff that resets the count, 2 growths in a run of 7,
    # backoffs in a row, a run cut short
    found_infs = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    start = 2.0**16 + 3
    want, got = update_both(found_infs, start, growth, backoff, interval=3)
    assert got == want
    scales = [start] + [s for s, _ in want]
    changes = ["grow" if b > a else "back" if b < a else "-" for a, b in zip(scales, scales[1:])]
    assert changes == ["-", "-", "grow", "-", "back", "-", "-", "grow", "-", "-", "grow", "-", "back", "back", "-",
                       "-", "back", "-"]


def test_scale_never_grows_to_inf():
    top = torch.tensor(3e38).item()
    want, got = update_both([0.0, 0.0], top, 2.0, 0.5, interval=1)
    assert got == want == [(top, 0)] * 2


@pytest.mark.parametrize("call, message", [
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_([d(torch.ones(3))], d(torch.zeros(2)),
                                                              d(torch.ones(1))), "found_inf must be a 1-element"),
    (lambda: torch._amp_foreach_non_finite_check_and_unscale_([d(torch.ones(3))], d(torch.zeros(1)),
                                                              d(torch.ones(1, dtype=torch.float64))),
     "inv_scale must be a float tensor"),
    (lambda: torch._amp_update_scale_(d(torch.ones(1)), d(torch.zeros(1)), d(torch.zeros(1)), 2.0, 0.5, 3),
     "growth_tracker must be an int tensor"),
    (lambda: torch._amp_update_scale_(d(torch.ones(2)), d(torch.zeros(1, dtype=torch.int32)), d(torch.zeros(1)),
                                      2.0, 0.5, 3), "current_scale must be a 1-element"),
], ids=["found_inf size", "inv_scale dtype", "tracker dtype", "scale size"])
def test_bad_arguments_name_the_problem(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_scaler_operators_wait_for_nothing(device):
    """Recorded into a graph (where reading the device raises), then replayed: the check,
    unscaling and the scale's update stay on the device."""
    tensors = [d(t) for t in grads(torch.float32)]
    found_inf, inv_scale = d(torch.zeros(1)), d(torch.tensor([0.5]))
    scale, tracker = d(torch.tensor([8.0])), d(torch.tensor([0], dtype=torch.int32))
    with device.graph() as g:
        torch._amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale)
        torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item(), found_inf.item()) == (8.0, 1, 0.0)
    tensors[4].view(-1)[4] = float("nan")
    g.replay()
    assert (scale.item(), tracker.item(), found_inf.item()) == (4.0, 0, 1.0)
    want = grads(torch.float32)
    torch.testing.assert_close(tensors[0].cpu(), want[0] * 0.25, rtol=0, atol=0)  # unscaled twice


def test_a_fused_scaled_training_step_waits_for_nothing(device):
    """A whole step (autocast forward, scaled backward, a fused Adam step the scaler skips on
    inf, the scale's update) records into a graph, where any read from the device raises;
    replayed, it does what the same steps do eagerly, an overflowing batch included."""
    import copy

    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3)).to("opencl")]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.Adam(m.parameters(), lr=1e-2, fused=True) for m in models]
    scalers = [torch.amp.GradScaler("opencl", init_scale=2.0**10, growth_interval=2) for _ in models]
    x, y = d(torch.randn(8, 12)), d(torch.randint(0, 3, (8,)))

    def step(i):
        with torch.autocast("opencl"):
            loss = F.cross_entropy(models[i](x), y)
        opts[i].zero_grad(set_to_none=False)
        scalers[i].scale(loss).backward()
        scalers[i].step(opts[i])
        scalers[i].update()

    for i in (0, 1):
        for _ in range(3):  # Adam's state made, the step counts past their first-step branch
            step(i)
    with device.graph() as g:
        step(0)
    step(1)
    scales = []
    for batch in (torch.randn(8, 12), torch.full((8, 12), 1e6), torch.randn(8, 12)):  # 1e6: inf in float16
        x.copy_(d(batch))
        g.replay()
        step(1)
        scales.append((scalers[0]._scale.item(), scalers[1]._scale.item()))
    # 2^10 grown every 2 clean steps: 2^12 after the recorded step, halved by the overflow
    assert scales == [(2.0**12, 2.0**12), (2.0**11, 2.0**11), (2.0**11, 2.0**11)]
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


# --- training ---------------------------------------------------------------------------

def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 33), nn.ReLU(), nn.Linear(33, 5))


def loss_curve(device, dtype=torch.float32, amp=False, fused=False, steps=24, init_scale=2.0**16, growth_interval=2000):
    """Per-step losses and the scaler's scale after each step, training make_model() on a
    fixed problem (labels of a random linear teacher)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(64, 3, 8, 8, generator=gen)
    y = (x.flatten(1) @ torch.randn(3 * 8 * 8, 5, generator=gen)).argmax(1)
    model = make_model().to(device, dtype)
    opt = (torch.optim.Adam(model.parameters(), lr=1e-2, fused=True) if fused else
           torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=growth_interval, enabled=amp)
    losses, scales = [], []
    for step in range(steps):
        batch = slice(16 * (step % 4), 16 * (step % 4 + 1))
        xb, yb = x[batch].to(device, dtype), y[batch].to(device)
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().float())
        scales.append(scaler._scale.detach().clone() if amp else torch.tensor(1.0))
    return torch.stack(losses).cpu().double(), [float(s) for s in torch.stack(scales).cpu()]


@pytest.fixture
def one_cpu_thread():
    """torch's CPU references on one thread (its idle workers would take PoCL's cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("fused", [False, True], ids=["SGD", "fused Adam"])
def test_amp_training_follows_the_float64_curve(fused, one_cpu_thread):
    reference, _ = loss_curve("cpu", torch.float64, fused=fused)
    torch_amp, _ = loss_curve("cpu", amp=True, fused=fused)
    plain, _ = loss_curve("opencl", fused=fused)
    ours, scales = loss_curve("opencl", amp=True, fused=fused)
    assert ours[-4:].mean() < 0.6 * ours[:4].mean(), ours                 # it trains
    assert scales == [2.0**16] * len(scales)                             # no step skipped
    torch_error = (torch_amp - reference).abs().max().item()
    error = (ours - reference).abs().max().item()
    # float16 products: each step's loss within a few times torch's own mixed-precision
    # drift from float64 (and float32's, which is small)
    assert error <= max(3 * torch_error, 2e-3), (error, torch_error)
    assert (plain - reference).abs().max().item() < 1e-4


def test_overflowing_steps_are_skipped_as_torch_skips_them(one_cpu_thread):
    """A first scale past float16's range: the gradients overflow, the steps are skipped and
    the scale backs off until they fit, then grows every 4 steps, step for step as torch's
    scaler on the CPU does (the skipped steps' losses repeat: nothing was updated)."""
    args = dict(amp=True, steps=16, init_scale=2.0**28, growth_interval=4)
    torch_losses, torch_scales = loss_curve("cpu", **args)
    losses, scales = loss_curve("opencl", **args)
    assert scales == torch_scales
    changes = [b / a for a, b in zip([2.0**28] + scales, scales)]
    assert changes[:4] == [0.5] * 4 and 2.0 in changes, scales
    assert torch.equal(losses[4:8], losses[:4])                         # the batches again, as they were
    torch.testing.assert_close(losses, torch_losses, rtol=1e-2, atol=1e-3)
