"""Bad input to ocl_conv2d and ocl_matmul raises TypeError or ValueError whose message
names the argument; empty and non-contiguous tensors are legal and give torch's result."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F


def good_conv():
    """x (1, 4, 8, 7), weight (6, 2, 3, 3), bias (6,): valid with groups=2."""
    torch.manual_seed(0)
    return torch.randn(1, 4, 8, 7), torch.randn(6, 2, 3, 3), torch.randn(6)


def conv_call(**change):
    x, weight, bias = good_conv()
    kwargs = dict(x=x, weight=weight, bias=bias, stride=1, dilation=1, groups=2)
    kwargs.update(change)
    return kwargs


CONV_ERRORS = {
    # name: (changed arguments, exception, pattern the message must match)
    "x_float64": (dict(x=torch.randn(1, 4, 8, 7, dtype=torch.float64)), TypeError, r"^x must be float32.*float64"),
    "x_int": (dict(x=torch.ones(1, 4, 8, 7, dtype=torch.int32)), TypeError, r"^x must be float32.*int32"),
    "x_half": (dict(x=torch.randn(1, 4, 8, 7).half()), TypeError, r"^x must be float32"),
    "weight_float64": (dict(weight=torch.randn(6, 2, 3, 3).double()), TypeError, r"^weight must be float32"),
    "bias_float64": (dict(bias=torch.randn(6).double()), TypeError, r"^bias must be float32"),
    "x_3d": (dict(x=torch.randn(4, 8, 7)), ValueError, r"^x must be 4-D.*\(4, 8, 7\)"),
    "x_5d": (dict(x=torch.randn(1, 1, 4, 8, 7)), ValueError, r"^x must be 4-D"),
    "weight_3d": (dict(weight=torch.randn(6, 2, 9)), ValueError, r"^weight must be 4-D"),
    "bias_2d": (dict(bias=torch.randn(6, 1)), ValueError, r"^bias must be 1-D"),
    "bias_wrong_length": (dict(bias=torch.randn(5)), ValueError, r"^bias must have C_out=6 elements.*\(5,\)"),
    "x_list": (dict(x=[[1.0]]), TypeError, r"^x must be a torch.Tensor, got list"),
    "x_numpy": (dict(x=np.zeros((1, 4, 8, 7), np.float32)), TypeError, r"^x must be a torch.Tensor, got ndarray"),
    "weight_list": (dict(weight=[1.0]), TypeError, r"^weight must be a torch.Tensor"),
    "bias_list": (dict(bias=[0.0] * 6), TypeError, r"^bias must be a torch.Tensor"),
    "x_meta_device": (dict(x=torch.empty(1, 4, 8, 7, device="meta")), ValueError, r"^x must be on the CPU.*meta"),
    "weight_meta_device": (dict(weight=torch.empty(6, 2, 3, 3, device="meta")), ValueError, r"^weight must be on"),
    "x_sparse": (dict(x=torch.randn(1, 4, 8, 7).to_sparse()), TypeError, r"^x must be a dense tensor"),
    "channel_mismatch": (dict(x=torch.randn(1, 5, 8, 7)), ValueError, r"x has 5 channels.*groups=2"),
    "group_mismatch": (dict(groups=1), ValueError, r"x has 4 channels.*groups=1"),
    "c_out_not_divisible": (
        dict(weight=torch.randn(5, 2, 3, 3), bias=None),
        ValueError,
        r"weight has 5 output channels, not divisible by groups=2",
    ),
    "groups_zero": (dict(groups=0), ValueError, r"^groups must be positive"),
    "groups_negative": (dict(groups=-2), ValueError, r"^groups must be positive"),
    "groups_float": (dict(groups=2.0), TypeError, r"^groups must be an int"),
    "groups_bool": (dict(groups=True), TypeError, r"^groups must be an int"),
    "kernel_larger_than_input": (dict(x=torch.randn(1, 4, 2, 7)), ValueError, r"kernel 3x3.*larger than.*2x7"),
    "dilated_kernel_larger": (dict(dilation=(1, 4)), ValueError, r"kernel 3x3 with dilation \(1, 4\).*larger"),
    "empty_kernel": (dict(weight=torch.randn(6, 2, 3, 0)), ValueError, r"^weight must have a kernel of at least"),
    "empty_height": (dict(x=torch.randn(1, 4, 0, 7)), ValueError, r"larger than the padded input 0x7"),
    "stride_zero": (dict(stride=0), ValueError, r"^stride must be positive"),
    "stride_negative": (dict(stride=(1, -1)), ValueError, r"^stride must be positive"),
    "dilation_zero": (dict(dilation=(0, 1)), ValueError, r"^dilation must be positive"),
    "dilation_negative": (dict(dilation=-1), ValueError, r"^dilation must be positive"),
    "stride_float": (dict(stride=1.5), TypeError, r"^stride must be an int or a pair of ints, got 1.5"),
    "stride_string": (dict(stride="2"), TypeError, r"^stride must be an int or a pair of ints"),
    "stride_none": (dict(stride=None), TypeError, r"^stride must be an int or a pair of ints, got None"),
    "stride_triple": (dict(stride=(1, 1, 1)), TypeError, r"^stride must be an int or a pair of ints"),
    "stride_single": (dict(stride=(2,)), TypeError, r"^stride must be an int or a pair of ints"),
    "stride_bool": (dict(stride=(True, 1)), TypeError, r"^stride must be an int or a pair of ints"),
    "dilation_float_pair": (dict(dilation=(1.0, 2.0)), TypeError, r"^dilation must be an int or a pair of ints"),
}


@pytest.mark.parametrize("change, error, pattern", CONV_ERRORS.values(), ids=CONV_ERRORS.keys())
def test_conv2d_bad_input(ocl, change, error, pattern):
    with pytest.raises(error, match=pattern):
        ocl.ocl_conv2d(**conv_call(**change))


def test_conv2d_accepts_integer_like_arguments(ocl):
    """NumPy integers and lists stand in for ints and pairs, as in torch."""
    x, weight, bias = good_conv()
    expected = F.conv2d(x, weight, bias, (2, 1), 0, (1, 2), 2)
    actual = ocl.ocl_conv2d(x, weight, bias, stride=[np.int64(2), 1], dilation=(1, 2), groups=np.int32(2))
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def matmul_args(**change):
    torch.manual_seed(0)
    kwargs = dict(a=torch.randn(7, 5), b=torch.randn(5, 3))
    kwargs.update(change)
    return kwargs


MATMUL_ERRORS = {
    "k_mismatch": (dict(b=torch.randn(4, 3)), ValueError, r"disagree on K: a is \(7, 5\), b is \(4, 3\)"),
    "batched_k_mismatch": (dict(a=torch.randn(2, 7, 6)), ValueError, r"disagree on K"),
    "a_1d": (dict(a=torch.randn(5)), ValueError, r"^a must have at least 2 dimensions"),
    "a_0d": (dict(a=torch.tensor(1.0)), ValueError, r"^a must have at least 2 dimensions"),
    "b_1d": (dict(b=torch.randn(5)), ValueError, r"^b must be 2-D"),
    "b_3d": (dict(b=torch.randn(2, 5, 3)), ValueError, r"^b must be 2-D"),
    "a_float64": (dict(a=torch.randn(7, 5).double()), TypeError, r"^a must be float32"),
    "b_int64": (dict(b=torch.ones(5, 3, dtype=torch.int64)), TypeError, r"^b must be float32.*int64"),
    "a_bfloat16": (dict(a=torch.randn(7, 5).bfloat16()), TypeError, r"^a must be float32"),
    "a_list": (dict(a=[[1.0] * 5] * 7), TypeError, r"^a must be a torch.Tensor, got list"),
    "b_numpy": (dict(b=np.ones((5, 3), np.float32)), TypeError, r"^b must be a torch.Tensor, got ndarray"),
    "a_meta": (dict(a=torch.empty(7, 5, device="meta")), ValueError, r"^a must be on the CPU"),
    "b_meta": (dict(b=torch.empty(5, 3, device="meta")), ValueError, r"^b must be on the CPU"),
    "a_sparse": (dict(a=torch.randn(7, 5).to_sparse()), TypeError, r"^a must be a dense tensor"),
}


@pytest.mark.parametrize("change, error, pattern", MATMUL_ERRORS.values(), ids=MATMUL_ERRORS.keys())
def test_matmul_bad_input(ocl, change, error, pattern):
    with pytest.raises(error, match=pattern):
        ocl.ocl_matmul(**matmul_args(**change))


def huge(*shape):
    """A tensor of `shape` that holds one float (expanded), so no memory is spent."""
    return torch.zeros(1).expand(*shape)


def test_too_large_inputs(ocl):
    """2**16 * (2**15 + 1) elements: more than the kernels' 32-bit indices reach."""
    with pytest.raises(ValueError, match=r"^a has 2147549184 elements; at most"):
        ocl.ocl_matmul(huge(2**16, 2**15 + 1), torch.zeros(2**15 + 1, 3))
    with pytest.raises(ValueError, match=r"^x has 2147549184 elements"):
        ocl.ocl_conv2d(huge(1, 1, 2**16, 2**15 + 1), torch.zeros(1, 1, 1, 1))


def test_too_large_outputs(ocl):
    """Checked before anything is allocated (these would need 16 GiB)."""
    with pytest.raises(ValueError, match=r"^the output \(65536, 65536\) would have 4294967296 elements"):
        ocl.ocl_matmul(huge(2**16, 1), huge(1, 2**16))
    with pytest.raises(ValueError, match=r"^the output \(1, 4, 32768, 32768\) would have"):
        ocl.ocl_conv2d(huge(1, 1, 2**15, 2**15), torch.zeros(4, 1, 1, 1))


def test_errors_leave_the_library_usable(ocl):
    """After a rejected call, the next good call still gives the right answer."""
    for change, error, _ in list(CONV_ERRORS.values())[:5]:
        with pytest.raises(error):
            ocl.ocl_conv2d(**conv_call(**change))
    x, weight, bias = good_conv()
    torch.testing.assert_close(
        ocl.ocl_conv2d(x, weight, bias, groups=2), F.conv2d(x, weight, bias, groups=2), atol=1e-4, rtol=1e-4
    )


# ---------------------------------------------------------------------------------
# Legal edge cases: empty and non-contiguous tensors


EMPTY_CONVS = {
    # name: (x shape, weight shape, groups)
    "batch_0": ((0, 4, 8, 7), (6, 2, 3, 3), 2),
    "batch_0_depthwise": ((0, 4, 8, 7), (4, 1, 3, 3), 4),
}


@pytest.mark.parametrize("x_shape, w_shape, groups", EMPTY_CONVS.values(), ids=EMPTY_CONVS.keys())
def test_conv2d_empty_matches_torch(ocl, x_shape, w_shape, groups):
    x, weight, bias = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[0])
    expected = F.conv2d(x, weight, bias, groups=groups)
    torch.testing.assert_close(ocl.ocl_conv2d(x, weight, bias, groups=groups), expected, atol=0, rtol=0)


def test_conv2d_no_output_channels(ocl):
    """C_out = 0 (torch refuses it; here it is an empty result of the right shape)."""
    out = ocl.ocl_conv2d(torch.randn(2, 4, 8, 7), torch.randn(0, 4, 3, 3), torch.randn(0))
    assert out.shape == (2, 0, 6, 5)


def test_conv2d_no_input_channels(ocl):
    """C_in = 0: every output is an empty sum, so it is the bias (as F.linear does for K = 0)."""
    bias = torch.randn(3)
    out = ocl.ocl_conv2d(torch.randn(2, 0, 8, 7), torch.randn(3, 0, 3, 3), bias)
    torch.testing.assert_close(out, bias.view(1, 3, 1, 1).expand(2, 3, 6, 5), atol=0, rtol=0)
    no_bias = ocl.ocl_conv2d(torch.randn(1, 0, 4, 4), torch.randn(3, 0, 2, 2))
    torch.testing.assert_close(no_bias, torch.zeros(1, 3, 3, 3), atol=0, rtol=0)


def test_conv2d_non_contiguous(ocl):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 10, 9)[:, ::2, 1:, :]  # channel stride 2, row offset
    weight = torch.randn(3, 8, 3, 6)[:, ::2, :, ::2]
    bias = torch.randn(6)[::2]
    assert not (x.is_contiguous() or weight.is_contiguous() or bias.is_contiguous())
    expected = F.conv2d(x, weight, bias)
    torch.testing.assert_close(ocl.ocl_conv2d(x, weight, bias), expected, atol=1e-4, rtol=1e-4)


def test_conv2d_requires_grad_input(ocl):
    """Tensors that require grad are read as they are (ocl_conv2d itself is not differentiable)."""
    x, weight, bias = good_conv()
    weight.requires_grad_()
    out = ocl.ocl_conv2d(x, weight, bias, groups=2)
    torch.testing.assert_close(out, F.conv2d(x, weight.detach(), bias, groups=2), atol=1e-4, rtol=1e-4)


def test_matmul_empty_and_non_contiguous(ocl):
    torch.manual_seed(0)
    a = torch.randn(3, 9, 8).transpose(0, 2)[:, ::2]  # (8, 5, 3): batched, strided
    b = torch.randn(6, 3).t()
    assert not a.is_contiguous()
    torch.testing.assert_close(ocl.ocl_matmul(a, b), a @ b, atol=1e-4, rtol=1e-4)
    empty = torch.randn(0, 3)
    torch.testing.assert_close(ocl.ocl_matmul(empty, b), empty @ b, atol=0, rtol=0)
