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

    ocl.fill_outputs_with_nan = True  # an output the kernel never writes fails, not passes on stale memory
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


def _time_naive(case: dict, warmup: int, runs: int) -> dict:
    """The naive baseline (grading.baselines, one output per work-item), fastest of the runs."""
    from grading.baselines import naive_conv2d

    times = []
    for i in range(warmup + runs):
        y, kernel_ns = naive_conv2d(case["x"], case["weight"], case["bias"], stride=tuple(case["stride"]))
        if i >= warmup:
            times.append(kernel_ns)
    return {"y": y, "kernel_ns": min(times)}


def step_perf(inputs: dict, outdir: Path) -> None:
    """Times every layer with opencl_functions; then, when asked (reference runs only), the
    naive baseline, after the timed layers are done."""
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
        for i in inputs["layers"]:
            if "error" not in results[i]:
                results[i]["naive"] = _time_naive(perf_inputs(i), inputs["warmup"], inputs["runs"])
            _save(outdir, i, results[i])


STEPS = {"cases": step_cases, "perf": step_perf}


def main() -> None:
    step, inputs_path, outdir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    inputs = torch.load(inputs_path, weights_only=True)
    STEPS[step](inputs, outdir)


if __name__ == "__main__":
    main()
