"""Checks the device's operator tests share: an operator on the CPU and on the opencl device,
outputs and gradients compared (check), seeded inputs (randn), a scope where the CPU
fallback is allowed (fallback_allowed), the launches a block made (logged_launches), and
training runs held to float64 as closely as torch's float32 (assert_trained_as_accurately)."""
import contextlib
import os

import torch

ATOL, RTOL = 1e-5, 1e-4


@contextlib.contextmanager
def fallback_allowed():
    """Within: operators without a kernel for these inputs may run on the CPU (float64 cases
    whose surrounding torch operators are float32-only on the device)."""
    saved = os.environ.get("OCLF_FALLBACK")
    os.environ["OCLF_FALLBACK"] = "silent"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OCLF_FALLBACK", None)
        else:
            os.environ["OCLF_FALLBACK"] = saved


@contextlib.contextmanager
def logged_launches():
    """The launches made inside the block, as (path, kernel, options) in launch order, in the
    list it yields (filled as the block ends): the launch log of opencl_functions.devices."""
    from opencl_functions import devices

    devices.launch_log_start()
    made = []
    try:
        yield made
        made += [(l["path"], l["kernel"], l["options"]) for l in devices.launch_log_take()]
    finally:
        devices.launch_log_stop()


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)), dtype=dtype)


def check(fn, *inputs, atol=ATOL, rtol=RTOL, grad=True):
    """fn on the CPU and on the device: every result, and every floating input's gradient of
    sum(result · R), agree (NaN where the CPU has NaN). Inputs are CPU tensors (or other
    arguments, passed as they are); `grad`: True (every floating input), False, or the positions
    of the inputs to differentiate (a loss's weights, for one, have no gradient)."""
    results = []
    for device in ("cpu", "opencl"):
        wants = [(grad if isinstance(grad, bool) else i in grad) and isinstance(t, torch.Tensor)
                 and t.is_floating_point() for i, t in enumerate(inputs)]
        xs = [t.detach().clone().to(device).requires_grad_(w) if isinstance(t, torch.Tensor) else t
              for t, w in zip(inputs, wants)]
        ys = fn(*xs)
        ys = list(ys) if isinstance(ys, (tuple, list)) else [ys]
        wanted = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        floats = [y for y in ys if y.is_floating_point() and y.requires_grad]
        if wanted and floats:
            total = sum((y * torch.randn(y.shape, generator=torch.Generator().manual_seed(i + 1),
                                         dtype=y.dtype).to(device)).sum() for i, y in enumerate(floats))
            grads = torch.autograd.grad(total, wanted, allow_unused=True)
            ys += [g for g in grads if g is not None]
        results.append(ys)
    assert len(results[0]) == len(results[1])
    for got, ref in zip(results[1], results[0]):
        assert got.device.type == "opencl"
        torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=atol, rtol=rtol, equal_nan=True)




def assert_trained_as_accurately(runs, factor=4.0, floor=1e-7):
    """Training results {name: tensor} of three runs of the same steps, ("opencl", float32),
    ("cpu", float32) and ("cpu", float64): each of the device's lies as close to float64 as
    `factor` times torch's own float32 drift (floor: for results float32 computes nearly
    exactly), both measured relative to the reference's largest value."""
    from extras.validation.accuracy import error

    device, cpu, reference = runs
    assert device.keys() == cpu.keys() == reference.keys()
    for name, ref in reference.items():
        assert device[name].device.type == "opencl", name
        assert device[name].shape == cpu[name].shape == ref.shape, (name, device[name].shape, ref.shape)
        ours, torchs = error(device[name], ref), error(cpu[name], ref)
        assert ours <= factor * torchs + floor, f"{name}: device {ours:.2e} from float64, torch's float32 {torchs:.2e}"


def two_devices_env(ocl) -> dict:
    """The environment of processes that see two devices of one platform: the machine's, or
    two PoCL devices (POCL_DEVICES) where the platform has one; a skip where neither is there."""
    import pytest
    from pathlib import Path

    ROOT = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OCLF_FALLBACK": "error"}
    if ocl.device_count() >= 2:
        return env
    if not any("Portable Computing Language" in d["platform"] for d in ocl.list_devices()):
        pytest.skip("one OpenCL device, and no PoCL to make two with POCL_DEVICES")
    return {**env, "POCL_DEVICES": "pthread pthread", "OCLF_DEVICE": "pocl", "OCLF_VISIBLE_DEVICES": ""}
