"""The grader's child: runs one step against the compiled opencl_functions found on
sys.path (a student's build, or a ladder rung's) and writes its results as files.

    python -m grading.child cases INPUTS OUTDIR
    python -m grading.child perf  INPUTS OUTDIR GO_FD DONE_FD

INPUTS is a torch.save'd dict the parent wrote; results go to OUTDIR/NNN.pt as
{"y": tensor, ...} or {"error": text}. This process runs the student's code, so the
parent trusts none of it: it reads the files back with size limits and compares them
with references it computed itself. Nothing here is graded by what it prints.

The perf step is timed by the parent's clock, not by this process: before each call it
writes "r" (ready: the inputs are in place) to DONE_FD and waits for "g" on GO_FD; the
parent starts its clock and writes "g"; after the call and a copy of its output, this
process writes "d" (or "e" on an error) and the parent stops its clock.
"""
from __future__ import annotations

import os
import sys
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


def _conv2d(ocl, case: dict) -> torch.Tensor:
    return ocl.ocl_conv2d(case["x"], case["weight"], case["bias"], stride=tuple(case["stride"]),
                          dilation=tuple(case["dilation"]), groups=case["groups"])


def _run_case(ocl, case: dict) -> dict:
    from grading.cases import matmul_operands

    if case["op"] == "conv2d":
        y = _conv2d(ocl, case)
        after = {key: case[key] for key in ("x", "weight", "bias") if case[key] is not None}
    else:
        y = ocl.ocl_matmul(*matmul_operands(case))
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


def step_perf(inputs: dict, outdir: Path, go_fd: int, done_fd: int) -> None:
    """Each layer's runs, each with its own inputs, each call timed by the parent. Saves per
    layer {"y": [outputs], "kernel_ns": [profiled kernel time]} or {"error": ...}."""
    import opencl_functions as ocl

    ocl.fill_outputs_with_nan = True
    go = os.fdopen(go_fd, "rb", buffering=0)
    done = os.fdopen(done_fd, "wb", buffering=0)
    for i, layer in enumerate(inputs["layers"]):
        outputs, kernel_ns = [], []
        for case in layer["runs"]:
            done.write(b"r")
            if go.read(1) != b"g":
                return  # the parent gave up on this step
            try:
                y = _conv2d(ocl, case).clone()  # a copy now: writes that land after the call do not count
            except Exception as err:
                done.write(b"e")
                _save(outdir, i, _error(err))
                return
            done.write(b"d")
            outputs.append(y)
            kernel_ns.append(ocl.last_kernel_time_ns())
        _save(outdir, i, {"y": outputs, "kernel_ns": kernel_ns})


def main() -> None:
    step, inputs_path, outdir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    inputs = torch.load(inputs_path, weights_only=True)
    if step == "perf":
        step_perf(inputs, outdir, int(sys.argv[4]), int(sys.argv[5]))
    elif step == "cases":  # also under Oclgrind, for the race and memory check
        step_cases(inputs, outdir)
    else:
        sys.exit(f"unknown step {step!r}")


if __name__ == "__main__":
    main()
