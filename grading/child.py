"""The grader's child: runs one step against the compiled opencl_functions found on
sys.path (a student's build, or the reference's) and writes one result file per case.

    python -m grading.child {cases,perf} INPUTS OUTDIR

INPUTS is a torch.save'd dict the parent wrote; each result goes to OUTDIR/NNN.pt as
{"y": tensor, ...} or {"error": text}. This process runs the student's code, so the
parent trusts none of it: it reads the files back with size limits and compares them
with references it computed itself. Nothing here is graded by what it prints.
"""
from __future__ import annotations

import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ERROR_CHARS = 3000


def _save(outdir: Path, index: int, result: dict) -> None:
    tmp = outdir / f"{index:03d}.tmp"
    torch.save(result, tmp)
    tmp.rename(outdir / f"{index:03d}.pt")


def _error(err: BaseException) -> dict:
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return {"error": text[-ERROR_CHARS:]}


def _run_case(ocl, case: dict) -> dict:
    if case["op"] == "conv2d":
        x, w, b = case["x"], case["weight"], case["bias"]
        y = ocl.ocl_conv2d(x, w, b, stride=tuple(case["stride"]), dilation=tuple(case["dilation"]),
                           groups=case["groups"])
        after = {"x": x, "weight": w} if b is None else {"x": x, "weight": w, "bias": b}
    else:
        b = case["b"].t() if case["b_transposed"] else case["b"]
        y = ocl.ocl_matmul(case["a"], b)
        after = {"a": case["a"], "b": case["b"]}
    return {"y": y, "inputs_after": after}


def _run_model(case: dict) -> dict:
    from grading.cases import build_gpt2, build_resnet
    from utils.patching import opencl_layers

    model = build_resnet(case["config"]) if case["op"] == "resnet" else build_gpt2(case["config"])
    model.load_state_dict(case["state_dict"])
    with torch.no_grad(), opencl_layers():
        out = model(case["input"])
    return {"y": out if case["op"] == "resnet" else out.logits}


def step_cases(inputs: dict, outdir: Path) -> None:
    """conv2d and matmul cases, and models ("resnet", "gpt2") with the OpenCL layers patched in."""
    import opencl_functions as ocl

    for i, case in enumerate(inputs["cases"]):
        try:
            result = _run_model(case) if case["op"] in ("resnet", "gpt2") else _run_case(ocl, case)
        except Exception as err:  # the student's error, reported as the case's failure
            result = _error(err)
        _save(outdir, i, result)


def _time_student(ocl, case: dict, warmup: int, runs: int) -> dict:
    kernel_ns, wall_ns = [], []
    for i in range(warmup + runs):
        start = time.perf_counter_ns()
        y = ocl.ocl_conv2d(case["x"], case["weight"], case["bias"], stride=tuple(case["stride"]))
        wall = time.perf_counter_ns() - start
        if i >= warmup:
            kernel_ns.append(ocl.last_kernel_time_ns())
            wall_ns.append(wall)
    # The fastest run: other load on the machine only ever adds time.
    return {"y": y, "kernel_ns": min(kernel_ns), "wall_ns": min(wall_ns),
            "kernel_ns_median": int(statistics.median(kernel_ns))}


class NaiveConv2d:
    """grading/kernels/conv2d_naive.cl through pyopencl, on the device opencl_functions uses."""

    def __init__(self, ocl) -> None:
        import pyopencl as cl

        self.cl = cl
        p, d = (int(v) for v in ocl.device_info()["index"].split(":"))
        device = cl.get_platforms()[p].get_devices()[d]
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        source = (Path(__file__).parent / "kernels" / "conv2d_naive.cl").read_text()
        self.kernel = cl.Program(self.ctx, source).build().conv2d_naive

    def __call__(self, case: dict, warmup: int, runs: int) -> dict:
        import numpy as np

        cl = self.cl
        x, w, bias = case["x"].numpy(), case["weight"].numpy(), case["bias"]
        batch, c_in, h, wd = x.shape
        c_out, _, k_h, k_w = w.shape
        s_h, s_w = case["stride"]
        h_out, w_out = (h - k_h) // s_h + 1, (wd - k_w) // s_w + 1
        mf = cl.mem_flags
        x_buf = cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        w_buf = cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=w)
        b_host = bias.numpy() if bias is not None else np.zeros(1, np.float32)
        b_buf = cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b_host)
        y = np.empty((batch, c_out, h_out, w_out), np.float32)
        y_buf = cl.Buffer(self.ctx, mf.WRITE_ONLY, y.nbytes)
        i32 = np.int32
        args = (x_buf, w_buf, b_buf, y_buf, i32(bias is not None), i32(batch), i32(c_in), i32(h), i32(wd),
                i32(c_out), i32(k_h), i32(k_w), i32(s_h), i32(s_w), i32(1), i32(1), i32(1), i32(h_out), i32(w_out))
        times = []
        for i in range(warmup + runs):
            event = self.kernel(self.queue, (w_out, h_out, batch * c_out), None, *args)
            event.wait()
            if i >= warmup:
                times.append(event.profile.end - event.profile.start)
        cl.enqueue_copy(self.queue, y, y_buf)
        return {"y": torch.from_numpy(y), "kernel_ns": min(times)}


def step_perf(inputs: dict, outdir: Path) -> None:
    """Times every layer with opencl_functions; then, when asked (reference runs only), the
    naive baseline, whose OpenCL context is made only after the timed layers are done."""
    from grading.cases import perf_inputs
    import opencl_functions as ocl

    results = {}
    for i in inputs["layers"]:
        try:
            results[i] = _time_student(ocl, perf_inputs(i), inputs["warmup"], inputs["runs"])
        except Exception as err:
            results[i] = _error(err)
        if not inputs["naive"]:
            _save(outdir, i, results[i])
    if inputs["naive"]:
        naive = NaiveConv2d(ocl)
        for i in inputs["layers"]:
            if "error" not in results[i]:
                results[i]["naive"] = naive(perf_inputs(i), inputs["warmup"], inputs["runs"])
            _save(outdir, i, results[i])


STEPS = {"cases": step_cases, "perf": step_perf}


def main() -> None:
    step, inputs_path, outdir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    inputs = torch.load(inputs_path, weights_only=True)
    STEPS[step](inputs, outdir)


if __name__ == "__main__":
    main()
