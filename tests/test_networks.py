"""Validated networks (extras/validation/networks.py): torchvision models with seeded random
weights, forward and backward with the OpenCL layers against plain torch. A few small
networks run by default; the whole list is opt-in (pytest -m slow)."""
import pytest

from extras.validation.networks import BACKWARD_TOL, FORWARD_TOL, flip_explained, validate
from extras.validation.zoo import NETWORKS


def check(name, batch, size):
    result = validate(name, batch=batch, size=size, repeat=0)
    assert result.note == "", f"{name}: {result.note}"
    assert result.conv_calls + result.linear_calls > 0, f"{name}: no layer went through OpenCL"
    assert result.forward_error <= FORWARD_TOL, f"{name}: forward error {result.forward_error:.2e}"
    # Gradients within BACKWARD_TOL of torch's, or no further from float64 than 10 times
    # torch's own float32 gradients are (see extras/validation/networks.py).
    # A ReLU input within rounding of zero may change sign between the two forwards; the
    # gradients then differ by whole elements, which the result reports.
    assert result.passed or flip_explained(result), (
        f"{name}: backward error {result.backward_error:.2e} (worst: {result.worst_parameter}), "
        f"{result.opencl_fp64_error:.2e} against float64 where torch float32 has {result.torch_fp32_error:.2e}; "
        f"tolerance {BACKWARD_TOL:.0e}"
    )


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "squeezenet1_0"])
def test_small_network(ocl, name):
    check(name, batch=2, size=32)


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_network(ocl, name):
    check(name, batch=1, size=64)
