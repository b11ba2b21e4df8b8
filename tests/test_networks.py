"""Validated networks (extras/validate_networks.py): torchvision models with seeded random
weights, forward and backward with the OpenCL layers against plain torch. A few small
networks run by default; the whole list is opt-in (pytest -m slow)."""
import pytest

from extras.validate_networks import BACKWARD_TOL, FORWARD_TOL, NETWORKS, validate


def check(name, batch, size):
    result = validate(name, batch=batch, size=size, repeat=0)
    assert result.note == "", f"{name}: {result.note}"
    assert result.conv_calls + result.linear_calls > 0, f"{name}: no layer went through OpenCL"
    assert result.forward_error <= FORWARD_TOL, f"{name}: forward error {result.forward_error:.2e}"
    assert result.backward_error <= BACKWARD_TOL, (
        f"{name}: backward error {result.backward_error:.2e} (worst: {result.worst_parameter})"
    )


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "squeezenet1_0"])
def test_small_network(ocl, name):
    check(name, batch=2, size=32)


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_network(ocl, name):
    check(name, batch=1, size=64)
