"""The grader's child: runs one step against the compiled opencl_functions found on
sys.path (a student's build, or a ladder rung's), talking to the grader over two pipes
(grading.channel) and nothing else:

    python -m grading.child cases   IN_FD OUT_FD
    python -m grading.child capture IN_FD OUT_FD
    python -m grading.child perf    IN_FD OUT_FD

The grader sends one case at a time and the next only after the child has answered, so
no input exists anywhere before its call. This process runs the student's code, so the
grader trusts none of what it says: it compares every output with references it computed
itself, and it times calls by its own clock.

cases:   per {"case": ...} answers {"y": ..., "inputs_after": ...} or {"error": ...}.
capture: the same, with the launch log capturing (kernels, NDRanges, arguments and the
         buffers around each launch: the race check runs them again under Oclgrind);
         the answer also holds "launches".
perf:    per {"case": ..., "capture": bool}: sends "r" when its inputs are in place and
         waits for "g"; the grader starts its clock, the child makes one call and sends
         "d" and the output's bytes (or "e" and {"error": ...}); the grader stops its clock
         when the last byte arrives, so an early "d" gains nothing. Then, untimed,
         {"kernel_ns": ..., "launches": ...}: what the call launched.
"""
from __future__ import annotations

import sys
import traceback
from typing import Dict

import torch

from grading import channel

ERROR_CHARS = 3000


def _error(err: BaseException) -> Dict:
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    return {"error": text[-ERROR_CHARS:]}


def _conv2d(ocl, case: Dict) -> torch.Tensor:
    return ocl.ocl_conv2d(case["x"], case["weight"], case["bias"], stride=tuple(case["stride"]),
                          dilation=tuple(case["dilation"]), groups=case["groups"])


def _run_case(ocl, case: Dict) -> Dict:
    from grading.cases import build_gpt2, build_resnet, matmul_operands
    from utils.patching import opencl_layers

    if case["op"] in ("resnet", "gpt2"):
        model = build_resnet(case["config"]) if case["op"] == "resnet" else build_gpt2(case["config"])
        model.load_state_dict(case["state_dict"])
        with torch.no_grad(), opencl_layers():
            out = model(case["input"])
        return {"y": out if case["op"] == "resnet" else out.logits}
    if case["op"] == "conv2d":
        y = _conv2d(ocl, case)
        after = {key: case[key] for key in ("x", "weight", "bias") if case[key] is not None}
    else:
        y = ocl.ocl_matmul(*matmul_operands(case))
        after = {"a": case["a"], "b": case["b"]}
    return {"y": y, "inputs_after": after}


def _launches(ocl) -> list:
    """The launch log, with its bytes as uint8 tensors (what a weights-only load reads)."""
    def convert(obj):
        if isinstance(obj, bytes):
            return torch.frombuffer(bytearray(obj), dtype=torch.uint8) if obj else torch.empty(0, dtype=torch.uint8)
        if isinstance(obj, dict):
            return {key: convert(value) for key, value in obj.items()}
        if isinstance(obj, list):
            return [convert(value) for value in obj]
        return obj
    return convert(ocl.devices.launch_log_take())


def step_cases(ocl, fd_in: int, fd_out: int, capture: bool) -> None:
    if capture:
        ocl.devices.launch_log_start(True)
    while (message := channel.receive(fd_in)) is not None and "case" in message:
        try:
            result = _run_case(ocl, message["case"])
        except Exception as err:  # the student's error, reported as the case's failure
            result = _error(err)
        if capture:
            result["launches"] = _launches(ocl)
        channel.send(fd_out, result)


def step_perf(ocl, fd_in: int, fd_out: int) -> None:
    ocl.devices.launch_log_start(False)
    while (message := channel.receive(fd_in)) is not None and "case" in message:
        case = message["case"]
        ocl.devices.launch_log_capture(bool(message.get("capture")))
        channel.write_all(fd_out, b"r")
        if channel.read_exactly(fd_in, 1) != b"g":
            return  # the grader gave up on this step
        try:
            y = _conv2d(ocl, case)
            data = y.detach().contiguous().numpy().tobytes()
        except Exception as err:
            channel.write_all(fd_out, b"e")
            channel.send(fd_out, _error(err))
            return
        channel.write_all(fd_out, b"d" + channel.HEADER.pack(len(data)) + data)
        channel.send(fd_out, {"kernel_ns": int(ocl.last_kernel_time_ns()), "launches": _launches(ocl)})


def main() -> None:
    step, fd_in, fd_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if step not in ("cases", "capture", "perf"):
        sys.exit(f"unknown step {step!r}")
    import opencl_functions as ocl

    ocl.fill_outputs_with_nan = True  # an output the kernel never writes fails, not passes on stale memory
    if step == "perf":
        step_perf(ocl, fd_in, fd_out)
    else:
        step_cases(ocl, fd_in, fd_out, capture=step == "capture")


if __name__ == "__main__":
    main()
