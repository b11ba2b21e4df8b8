"""Runs a program unchanged with the `opencl` device registered first, as a user would after
`pip install`: `python tests/programs/on_device.py PROGRAM.py ARGS...` (also as torchrun's
script). The program sees the argv, `__main__`, `__file__` and `sys.path[0]` that
`python PROGRAM.py ARGS...` gives it; the only addition is `import torch_opencl`
before it starts, so `torch.accelerator` finds the device.

At exit one line tells what the device did, for tests to check that the work ran there:
    [on_device] opencl peak bytes 123456 fallbacks {}
(the caching allocator's peak and the operators that ran on the CPU fallback)."""
import atexit
import os
import runpy
import sys

import torch

import torch_opencl as device


def report() -> None:
    # One write of the whole line, newline included: print() writes the text and the newline
    # apart, and under torchrun two ranks' lines then interleave on the shared pipe.
    line = (f"[on_device] opencl peak bytes {torch.opencl.max_memory_allocated()} "
            f"fallbacks {dict(device.fallback_ops())}\n")
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())


if len(sys.argv) < 2:
    raise SystemExit("usage: on_device.py PROGRAM.py [ARGS...]")
program = os.path.abspath(sys.argv[1])
if not os.path.isfile(program):
    raise SystemExit(f"on_device.py: no program at {program}")
sys.argv = [program] + sys.argv[2:]
sys.path[0] = os.path.dirname(program)
atexit.register(report)
runpy.run_path(program, run_name="__main__")
