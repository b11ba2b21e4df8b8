"""utils.patching and utils.conv2d_forward: whole models give torch's results with
opencl_layers(), every nn.Conv2d padding form runs through OpenCL, originals come back
on exit (also after an error and across nested contexts), float64 falls back with one
OpenCLFallbackWarning, and gradients through patched layers match torch's."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

# utils imports the compiled extension: without it, skip the module (as the ocl fixture would).
functional = pytest.importorskip("utils.functional", reason="opencl_functions is not built", exc_type=ImportError)
patching = pytest.importorskip("utils.patching", reason="opencl_functions is not built", exc_type=ImportError)
transformers = pytest.importorskip("transformers")
Conv1D = transformers.pytorch_utils.Conv1D
OpenCLFallbackWarning = functional.OpenCLFallbackWarning
REGISTRY, opencl_layers, patched_classes = patching.REGISTRY, patching.opencl_layers, patching.patched_classes

LINEAR = "torch.nn.modules.linear.Linear"
CONV1D = "transformers.pytorch_utils.Conv1D"
CONV2D = "torch.nn.modules.conv.Conv2d"


@pytest.fixture
def calls(monkeypatch):
    """Counts the OpenCL linear and conv2d calls the patched forwards make."""
    counts = {"linear": 0, "conv2d": 0}
    for name in counts:
        original = getattr(functional, name)

        def counting(*args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(functional, name, counting)
    return counts


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which fallback warnings were already given, so each test sees its own."""
    monkeypatch.setattr(functional, "_warned", set())


def forwards():
    return nn.Linear.forward, Conv1D.forward, nn.Conv2d.forward


# ---------------------------------------------------------------------------------
# Whole models


def greedy_tokens(model, prompt, steps):
    tokens = prompt
    with torch.no_grad():
        for _ in range(steps):
            logits = model(tokens).logits[:, -1]
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
    return tokens


def test_gpt2_greedy_tokens(ocl, calls):
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, config.vocab_size, (2, 5))
    expected = greedy_tokens(model, prompt, steps=12)
    with torch.no_grad():
        expected_logits = model(expected).logits
    with opencl_layers():
        actual = greedy_tokens(model, prompt, steps=12)
        with torch.no_grad():
            actual_logits = model(expected).logits
    # Per layer: c_attn, attention c_proj, c_fc, mlp c_proj; plus the lm_head.
    assert calls["linear"] == 13 * (4 * config.n_layer + 1)
    assert torch.equal(actual, expected)
    torch.testing.assert_close(actual_logits, expected_logits, atol=1e-4, rtol=1e-4)


def test_resnet18_random_weights(ocl, calls):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(2, 3, 48, 40)
    with torch.no_grad():
        expected = model(x)
        with opencl_layers():
            actual = model(x)
    assert calls == {"conv2d": 20, "linear": 1}
    torch.testing.assert_close(actual, expected, atol=1e-4 * expected.abs().max().item(), rtol=1e-3)


# ---------------------------------------------------------------------------------
# nn.Conv2d: every padding form and padding mode, batched and unbatched

PADDINGS = [0, 2, (1, 2), "same", "valid"]
MODES = ["zeros", "reflect", "replicate", "circular"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS, ids=str)
@pytest.mark.parametrize("kernel, dilation", [((3, 3), 1), ((2, 4), (2, 1))], ids=["3x3", "2x4_dilated"])
def test_conv2d_padding_forms(ocl, calls, padding, mode, kernel, dilation):
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, kernel, padding=padding, padding_mode=mode, dilation=dilation).eval()
    x = torch.randn(2, 4, 9, 11)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: 'same' with an even kernel copies the input
        expected = conv(x)
    with torch.no_grad(), opencl_layers():
        actual = conv(x)
    assert calls["conv2d"] == 1
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_conv2d_unbatched_input(ocl, calls, mode):
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 5, 3, padding=1, padding_mode=mode, stride=(2, 1)).eval()
    x = torch.randn(3, 10, 7)
    with torch.no_grad():
        expected = conv(x)
        with opencl_layers():
            actual = conv(x)
    assert calls["conv2d"] == 1
    assert actual.shape == expected.shape == (5, 5, 7)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_linear_and_conv1d(ocl, calls):
    torch.manual_seed(0)
    linear, conv1d = nn.Linear(33, 7), Conv1D(7, 33)
    x = torch.randn(2, 5, 33)
    with torch.no_grad():
        expected = linear(x), conv1d(x)
        with opencl_layers():
            actual = linear(x), conv1d(x)
    assert calls["linear"] == 2
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_linear_unbatched_input(ocl, calls):
    """nn.Linear takes a 1-D (in_features,) input too."""
    torch.manual_seed(0)
    linear = nn.Linear(33, 7)
    x = torch.randn(33)
    expected = grads(linear, x)
    with opencl_layers():
        actual = grads(linear, x)
    assert calls["linear"] == 1
    assert actual[0].shape == (7,)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------
# Patching and restoring


def test_registry_lists_the_patched_classes(ocl):
    assert {(p.kind, p.module, p.cls_name) for p in REGISTRY} >= {
        ("linear", "torch.nn", "Linear"),
        ("linear", "transformers.pytorch_utils", "Conv1D"),
        ("conv2d", "torch.nn", "Conv2d"),
    }
    assert patched_classes() == []
    with opencl_layers():
        assert patched_classes() == sorted([CONV2D, LINEAR, CONV1D])
    assert patched_classes() == []


def test_originals_restored(ocl):
    before = forwards()
    with opencl_layers():
        inside = forwards()
        assert all(i is not b for i, b in zip(inside, before))
    assert all(a is b for a, b in zip(forwards(), before))


def test_restored_after_exception(ocl):
    before = forwards()
    with pytest.raises(RuntimeError, match="inside the block"):
        with opencl_layers():
            raise RuntimeError("inside the block")
    assert all(a is b for a, b in zip(forwards(), before))
    assert patched_classes() == []


def test_restored_after_error_in_a_patched_layer(ocl):
    before = forwards()
    conv = nn.Conv2d(3, 4, 5)
    with pytest.raises(ValueError, match="larger than the padded input"):
        with opencl_layers():
            conv(torch.randn(1, 3, 2, 2))
    assert all(a is b for a, b in zip(forwards(), before))


def test_nested_inner_exit_keeps_outer(ocl):
    with opencl_layers():
        with opencl_layers(conv2d=False):
            assert patched_classes() == sorted([CONV2D, LINEAR, CONV1D])
        assert patched_classes() == sorted([CONV2D, LINEAR, CONV1D])
    assert patched_classes() == []


def test_nested_linear_outer_conv_inner(ocl, calls):
    conv, linear = nn.Conv2d(2, 3, 3), nn.Linear(4, 5)
    x_conv, x_lin = torch.randn(1, 2, 5, 5), torch.randn(2, 4)
    with torch.no_grad(), opencl_layers(conv2d=False):
        assert patched_classes() == sorted([LINEAR, CONV1D])
        conv(x_conv)
        assert calls["conv2d"] == 0
        with opencl_layers(linear=False):
            assert patched_classes() == sorted([CONV2D, LINEAR, CONV1D])
            conv(x_conv)
            linear(x_lin)
            assert calls == {"conv2d": 1, "linear": 1}
        assert patched_classes() == sorted([LINEAR, CONV1D])
        conv(x_conv)
        linear(x_lin)
        assert calls == {"conv2d": 1, "linear": 2}
    assert patched_classes() == []


def test_nothing_patched_without_kinds(ocl):
    before = forwards()
    with opencl_layers(linear=False, conv2d=False):
        assert patched_classes() == []
        assert all(a is b for a, b in zip(forwards(), before))


def test_contexts_closed_out_of_order(ocl):
    """Closing the outer context first leaves the inner one's patches in place."""
    outer, inner = opencl_layers(conv2d=False), opencl_layers(linear=False)
    outer.__enter__()
    inner.__enter__()
    try:
        outer.__exit__(None, None, None)
        assert patched_classes() == [CONV2D]
    finally:
        inner.__exit__(None, None, None)
    assert patched_classes() == []


def test_torch_threads_inside_and_restored(ocl):
    """On a CPU OpenCL device torch runs on torch_threads threads inside the block (the
    smallest any open context asks for), and its own setting comes back on exit, also
    after an error; elsewhere, or with torch_threads=None, it is never touched."""
    cpu = ocl.device_info()["type"] == "CPU"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with opencl_layers(torch_threads=None):
            assert torch.get_num_threads() == 2
            with opencl_layers(torch_threads=3):
                assert torch.get_num_threads() == (3 if cpu else 2)
                with opencl_layers():
                    assert torch.get_num_threads() == (1 if cpu else 2)
                assert torch.get_num_threads() == (3 if cpu else 2)
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="inside"):
            with opencl_layers():
                raise RuntimeError("inside")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_torch_threads_must_be_positive_int(ocl, bad):
    with pytest.raises(ValueError, match="torch_threads"):
        with opencl_layers(torch_threads=bad):
            pass
    assert patched_classes() == []


# ---------------------------------------------------------------------------------
# Fallback for inputs OpenCL cannot take


def test_float64_falls_back_with_one_warning(ocl, calls, fresh_warnings):
    torch.manual_seed(0)
    linear = nn.Linear(7, 3).double()
    x = torch.randn(2, 7, dtype=torch.float64)
    with torch.no_grad():
        expected = linear(x)
        with opencl_layers():
            with pytest.warns(OpenCLFallbackWarning, match="float64"):
                actual = linear(x)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a second call must not warn again
                again = linear(x)
    assert actual.dtype == torch.float64
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)
    torch.testing.assert_close(again, expected, atol=0, rtol=0)


def test_float64_conv2d_falls_back(ocl, fresh_warnings):
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect").double()
    x = torch.randn(1, 3, 6, 5, dtype=torch.float64)
    with torch.no_grad():
        expected = conv(x)
        with opencl_layers(), pytest.warns(OpenCLFallbackWarning, match="conv2d"):
            actual = conv(x)
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


def test_non_cpu_tensor_falls_back(ocl, fresh_warnings):
    """A tensor on another device (meta stands in for CUDA) runs through torch."""
    conv = nn.Conv2d(3, 4, 3, device="meta")
    x = torch.empty(2, 3, 8, 8, device="meta")
    with opencl_layers(), pytest.warns(OpenCLFallbackWarning, match="device meta"):
        out = conv(x)
    assert out.device.type == "meta" and out.shape == (2, 4, 6, 6)


# ---------------------------------------------------------------------------------
# Gradients through the patched layers


def grads(module, x):
    module.zero_grad()
    x = x.clone().requires_grad_()
    out = module(x)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return [out, x.grad] + [p.grad for p in module.parameters()]


def test_linear_gradients(ocl, calls):
    torch.manual_seed(0)
    linear = nn.Linear(33, 7)
    x = torch.randn(3, 5, 33)
    expected = grads(linear, x)
    with opencl_layers():
        actual = grads(linear, x)
    assert calls["linear"] == 1
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_conv1d_gradients(ocl, calls):
    torch.manual_seed(0)
    conv1d = Conv1D(9, 17)
    x = torch.randn(2, 4, 17)
    expected = grads(conv1d, x)
    with opencl_layers():
        actual = grads(conv1d, x)
    assert calls["linear"] == 1
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(padding=1),
        dict(padding=2, stride=2, dilation=2, groups=3, padding_mode="reflect"),
        dict(padding="same", bias=False),
    ],
    ids=["plain", "strided_dilated_grouped_reflect", "same_no_bias"],
)
def test_conv2d_gradients(ocl, calls, kwargs):
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 9, 3, **kwargs)
    x = torch.randn(2, 6, 11, 10)
    expected = grads(conv, x)
    with opencl_layers():
        actual = grads(conv, x)
    assert calls["conv2d"] == 1
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_functional_matches_torch_functional(ocl):
    """utils.functional.linear and conv2d take what F.linear and F.conv2d take."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 6, 9, 8), torch.randn(4, 3, 3, 2), torch.randn(4)
    torch.testing.assert_close(
        functional.conv2d(x, w, b, (2, 1), (1, 2), 2), F.conv2d(x, w, b, (2, 1), 0, (1, 2), 2), atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(functional.conv2d(x, w, b, 2, 2, 2), F.conv2d(x, w, b, 2, 0, 2, 2), atol=1e-4, rtol=1e-4)
    x, w = torch.randn(5, 33), torch.randn(7, 33)
    torch.testing.assert_close(functional.linear(x, w), F.linear(x, w), atol=1e-4, rtol=1e-4)
