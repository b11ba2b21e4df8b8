"""One launch layer: the library (ocl_conv2d, ocl_matmul) and the opencl device choose and
launch the reference's kernels through the same functions (opencl_functions/reference/,
opencl_functions/launch/), so for the same layer they launch the same kernels, with the
same build options and NDRanges. Checked per conv and linear layer of ResNet-50,
MobileNetV2 and GPT-2 (their shapes, random weights, batch 1) from both launch logs; and
the GPU kernel's settings (OCLF_GPU_TILE, OCLF_GPU_SPLIT_TARGET) change both alike."""
import os

import pytest
import torch
import torch.nn.functional as F

from bench.shapes import GPT2, RESNET50

# (name, c_in, size, c_out, k, stride, padding, groups): the distinct convs of torchvision's
# mobilenet_v2 at 224×224.
MOBILENET_V2 = [("mbv2.stem", 3, 224, 32, 3, 2, 1, 1), ("mbv2.dw32", 32, 112, 32, 3, 1, 1, 32),
                ("mbv2.pw32", 32, 112, 16, 1, 1, 0, 1)]
for _i, (_c, _hw, _out, _t, _s) in enumerate([(16, 112, 24, 6, 2), (24, 56, 24, 6, 1), (24, 56, 32, 6, 2),
                                              (32, 28, 32, 6, 1), (32, 28, 64, 6, 2), (64, 14, 64, 6, 1),
                                              (64, 14, 96, 6, 1), (96, 14, 96, 6, 1), (96, 14, 160, 6, 2),
                                              (160, 7, 160, 6, 1), (160, 7, 320, 6, 1)]):
    _e = _c * _t  # expand 1×1, depthwise 3×3, project 1×1
    MOBILENET_V2 += [(f"mbv2.b{_i}.expand", _c, _hw, _e, 1, 1, 0, 1),
                     (f"mbv2.b{_i}.dw", _e, _hw, _e, 3, _s, 1, _e),
                     (f"mbv2.b{_i}.project", _e, _hw // _s, _out, 1, 1, 0, 1)]
MOBILENET_V2.append(("mbv2.head", 320, 7, 1280, 1, 1, 0, 1))

CONVS = {"resnet50": [(f"resnet50.{s.name}", s.c_in, s.h, s.c_out, s.k, s.stride, s.padding, 1) for s in RESNET50],
         "mobilenetv2": list(dict.fromkeys(MOBILENET_V2))}


@pytest.fixture
def logs(ocl, opencl_device, monkeypatch):
    """Settings both paths read, cleared; the device's launch log on."""
    for name in ("OCLF_CONV_KERNEL", "OCLF_MATMUL", "OCLF_CPU_BLOCK", "OCLF_GPU_TILE", "OCLF_GPU_SPLIT_TARGET",
                 "OCLF_DEVICE_CONV", "OCLF_DEVICE_MATMUL", "OCLF_KERNEL_DIR", "OCL_KERNEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OCLF_TUNE", "0")  # the rules' defaults, not timings
    ocl.devices.launch_log_start()
    yield ocl
    ocl.devices.launch_log_stop()


def launch(path, kernel, options, global_size, local_size):
    """One launch as the two logs are compared: the kernel file relative to the library's
    kernel folder, the kernel, its build options and NDRange."""
    return os.path.relpath(path, LIBRARY_DIR), kernel, options, tuple(global_size), tuple(local_size)


LIBRARY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/opencl_functions"


def logged(launches) -> list:
    """The log's launches as launch() describes them."""
    return [launch(l["path"], l["kernel"], l["options"], l["global"], l["local"]) for l in launches]


def library_launches(ocl, call):
    ocl.devices.launch_log_take()
    with torch.no_grad():
        result = call()
    return result, logged(ocl.devices.launch_log_take())


def device_launches(ocl, call):
    torch.opencl.synchronize()
    ocl.devices.launch_log_take()
    with torch.no_grad():
        result = call().cpu()
    # The device's own plumbing (padding, copies) is not shared.
    return result, logged(l for l in ocl.devices.launch_log_take() if "/torch_opencl/kernels/" not in l["path"])


def conv_launches(ocl, layer):
    """(library's launches, device's launches) of one conv layer, after checking both results."""
    _, c_in, size, c_out, k, stride, padding, groups = layer
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, c_in, size, size, generator=gen)
    w = torch.nn.Parameter(torch.randn(c_out, c_in // groups, k, k, generator=gen) / (c_in // groups * k * k) ** 0.5)
    b = torch.nn.Parameter(torch.randn(c_out, generator=gen))
    ref = F.conv2d(x, w, b, stride, padding, 1, groups)
    lib_y, lib = library_launches(ocl, lambda: ocl.ocl_conv2d(F.pad(x, (padding,) * 4), w, b, stride, 1, groups))
    wd, bd = torch.nn.Parameter(w.detach().to("opencl")), torch.nn.Parameter(b.detach().to("opencl"))
    xd = x.to("opencl")
    dev_y, dev = device_launches(ocl, lambda: F.conv2d(xd, wd, bd, stride, padding, 1, groups))
    torch.testing.assert_close(lib_y, ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(dev_y, ref, atol=1e-3, rtol=1e-3)
    return lib, dev


def product_launches(ocl, m, k, n, conv1d):
    """A GPT-2 product: transformers' Conv1D (weight K×N, bias) or the LM head (nn.Linear's
    N×K weight, no bias), as the patched layer and the device's addmm / linear run it."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen)
    w = torch.nn.Parameter(torch.randn(k, n, generator=gen) if conv1d else torch.randn(n, k, generator=gen))
    w.data /= k ** 0.5
    bias = torch.nn.Parameter(torch.randn(n, generator=gen)) if conv1d else None
    ref = a @ w if conv1d else a @ w.t()
    lib_y, lib = library_launches(ocl, lambda: ocl.ocl_matmul(a, w if conv1d else w.t()))
    ad, wd = a.to("opencl"), torch.nn.Parameter(w.detach().to("opencl"))
    if conv1d:
        bd = torch.nn.Parameter(bias.detach().to("opencl"))
        dev_y, dev = device_launches(ocl, lambda: torch.addmm(bd, ad, wd))
        ref = ref + bias.detach()
    else:
        dev_y, dev = device_launches(ocl, lambda: F.linear(ad, wd))
    torch.testing.assert_close(lib_y, a @ w if conv1d else ref, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(dev_y, ref, atol=2e-3, rtol=2e-3)
    return lib, dev


@pytest.mark.parametrize("model", sorted(CONVS))
def test_convs_launch_alike(logs, model):
    differ = []
    for layer in CONVS[model]:
        lib, dev = conv_launches(logs, layer)
        assert lib, f"{layer[0]}: the library launched no reference kernel"
        if lib != dev:
            differ.append(f"{layer[0]}:\n  library {lib}\n  device  {dev}")
    assert not differ, "\n".join(differ)


def test_gpt2_products_launch_alike(logs):
    differ = []
    for s in GPT2:
        lib, dev = product_launches(logs, s.m, s.k, s.n, conv1d=not s.name.startswith("lm_head"))
        assert lib, f"{s.name}: the library launched no reference kernel"
        if not dev and any(launch[1] == "conv2d_gpu" for launch in lib):
            continue  # products the library runs as conv2d_gpu GEMMs the device leaves to CLBlast (blas.cpp)
        if lib != dev:
            differ.append(f"{s.name}:\n  library {lib}\n  device  {dev}")
    assert not differ, "\n".join(differ)


# One output tile of the GPU kernel (32 channels × 25 pixels) over a K of 576: split K by
# OCLF_GPU_SPLIT_TARGET's aim, tiles by OCLF_GPU_TILE.
ONE_TILE = ("one-tile", 64, 7, 32, 3, 1, 0, 1)


def test_gpu_settings_reach_both_paths(ocl, logs, monkeypatch):
    """Forced onto conv2d_gpu (OCLF_CONV_KERNEL=gpu, which the device honours too), a layer of
    one output tile launches alike on both paths under each setting, and each setting
    changes what both launch: the split-K aim the number of slices, the tile the build
    options and work-groups."""
    monkeypatch.setenv("OCLF_CONV_KERNEL", "gpu")
    seen = {}
    for name, value in [("", ""), ("OCLF_GPU_SPLIT_TARGET", "1"), ("OCLF_GPU_TILE", "32,32,4,4,16")]:
        if name:
            monkeypatch.setenv(name, value)
        lib, dev = conv_launches(logs, ONE_TILE)
        if name:
            monkeypatch.delenv(name)
        assert lib == dev, f"{name}={value}:\n  library {lib}\n  device  {dev}"
        assert lib[0][1] == "conv2d_gpu", lib
        seen[name] = lib
    if ocl.device_info()["compute_units"] < 4:
        # Fewer slices (NDRange dim 2). The aim shows while aim × compute units stays under
        # split-K's cap for this layer (K / (4·TK) slices): on devices of a few compute units.
        assert seen["OCLF_GPU_SPLIT_TARGET"][0][3] != seen[""][0][3]
    assert "-DGTM=32 -DGTN=32" in seen["OCLF_GPU_TILE"][0][2] and seen["OCLF_GPU_TILE"][0][4] == (8, 8, 1)
    assert "-DGTM=32 -DGTN=32" not in seen[""][0][2]
