"""Every setting of the project, in one table: environment variables under one prefix,
OCLF_, read when used (never cached at import), with the older names still working as
aliases. Each setting names who reads it: the C++ runtime (through runtime/settings.hpp),
this package, or the course tools (setup.py, the grader). README's "Settings" section is
this table; a test checks that every OCLF_ name in the sources is in it.

Each setting has an audience: everyone (the library's users and the students), or the
staff (`staff=True`: settings of code the student handout does not hold). The staff's come
last, in a staff region, so the handout's copy of this table, and its README's table,
leave them out.

    settings.get("DEVICE")        the value, "" when unset (OCLF_DEVICE, else OCL_DEVICE)
    settings.variable("DEVICE")   the variable that gave it ("OCL_DEVICE" when the alias did)
    settings.SETTINGS             the table, settings for everyone first

This module imports nothing of the package: the course tools, which read settings before
the extension is built (and the grader, which never loads it), load it by path through
grading/library.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Tuple

PREFIX = "OCLF_"


@dataclass(frozen=True)
class Setting:
    name: str  # without the prefix
    default: str  # in words, as the README shows it
    meaning: str
    reader: str  # who reads it
    aliases: Tuple[str, ...] = ()  # older variable names that still work
    staff: bool = False  # its audience: the staff alone (the reference, the device, the grader)

    @property
    def variable(self) -> str:
        return PREFIX + self.name


SETTINGS: Dict[str, Setting] = {s.name: s for s in [
    # The library's.
    Setting("DEVICE", "the first GPU, else the first device",
            'the OpenCL device: "P:D" (platform and device index) or part of a device, platform or vendor name; '
            "its platform's devices are the process's devices (numbered 0, 1, ...) and it is the default one",
            "C++ runtime (device)", ("OCL_DEVICE",)),
    Setting("VISIBLE_DEVICES", "every device of the platform",
            'the platform\'s device indices that become the process\'s devices, in order: "1,0" makes the '
            "platform's device 1 the process's device 0 and its device 0 its device 1",
            "C++ runtime (device)"),
    Setting("KERNEL_DIR", "opencl_functions/", "the folder .cl files are read from", "C++ runtime (programs)",
            ("OCL_KERNEL_DIR",)),
    Setting("ZERO_COPY", "1", "0: copy inputs and outputs on CPU devices instead of wrapping host memory",
            "C++ runtime (device)"),
    Setting("TUNE", "1",
            "tuning at first use: 1 measures the shapes the cache lacks (within the budget), cache only "
            "reads the cache, 0 takes the defaults derived from the device, sweep measures every shape "
            "again with the full candidate lists",
            "C++ runtime (tuning)"),
    Setting("TUNE_BUDGET", "5", "seconds that tuning at first use may take per process", "C++ runtime (tuning)"),
    Setting("TUNE_DIR", "$XDG_CACHE_HOME/opencl_functions, else ~/.cache/opencl_functions",
            "the folder of the tuning cache (one file per device and driver)", "C++ runtime (tuning)"),
    Setting("PROGRAM_CACHE", "1",
            "the binaries of built OpenCL programs, kept so that later processes load them instead of "
            "compiling the source again: 1 keeps them in programs/ beside the tuning cache, 0 builds from "
            "source every time, a path (with a /) is the folder",
            "C++ runtime (programs)"),
    Setting("CLBLAST_PARAMS", "opencl_functions/clblast_params/<device>.json if present",
            "0: CLBlast's own tuning; a path: that parameter file", "opencl_functions.clblast_params"),
    # The course tools': setup.py's.
    Setting("BUILD_JOBS", "the CPU count", "parallel compile jobs of setup.py", "setup.py"),
    Setting("BUILD_EXTENSIONS", "1", "0: setup.py installs the package's files without compiling (the editable "
            "install of scripts/setup.sh)", "setup.py"),
    # BEGIN STAFF
    # The reference's host code and the opencl device.
    Setting("CONV_KERNEL", "by device and shape",
            "force one of the reference solution's conv2d kernels: tiled (not on the opencl device), cpu, gpu, "
            "depthwise or depthwise_cpu",
            "the reference's host code, the opencl device", staff=True),
    Setting("CPU_BLOCK", "by layer shape", "the reference's CPU kernel block: output channels (4, 8 or 16), pixels "
            "(COV,PX), or COV,PX,KC,NS: input channels in chunks of KC over NS pixel blocks",
            "the reference's host code, the opencl device", staff=True),
    Setting("GPU_TILE", "by layer shape", "the reference's GPU kernel tile: TM,TN,WM,WN,TK",
            "the reference's host code, the opencl device", staff=True),
    Setting("GPU_SPLIT_TARGET", "2",
            "work-groups per compute unit the reference's GPU kernel aims at when it splits K (1..64)",
            "the reference's host code, the opencl device", staff=True),
    Setting("MMA", "auto",
            "tensor cores (inline PTX mma.sync, NVIDIA devices of compute capability 8.0 and later that build "
            "it) for the reference's GPU convolution kernel on 16-bit layers and the opencl device's 16-bit "
            "products: 0 turns them off; emulate runs the products' tensor-core kernel on any device, its warp "
            "instructions done in plain OpenCL C (slow: for tests)",
            "the reference's host code, the opencl device", staff=True),
    Setting("MMA_TILE", "by shape",
            "the opencl device's 16-bit products on tensor cores: force a block BM,BN,WM,WN,STAGES or "
            "BM,BN,WM,WN,STAGES,BK,SPLITS (BM×BN outputs per work-group of WM×WN warps, STAGES slices of BK "
            "values of k in flight, k split SPLITS ways)",
            "the opencl device", staff=True),
    Setting("FLASH_ATTENTION", "1",
            "the opencl device's 16-bit attention without a mask runs on tensor cores "
            "(kernels/flash_attention.cl) where OCLF_MMA lets them run; 0 keeps the portable kernel",
            "the opencl device", staff=True),
    Setting("FLASH_BLOCK", "by head width",
            "the opencl device's flash attention: force a block WARPS,MT,BN (WARPS warps of MT pieces of 16 "
            "query rows each, BN keys at a time)",
            "the opencl device", staff=True),
    Setting("MATMUL", "by shape and device",
            "force one of the reference solution's matrix-product paths: clblast, rows, cols or conv, "
            "or a whole configuration such as \"rows VW=8 MR=1 RN=4 LX=1 LY=1\"",
            "the reference's host code, the opencl device", staff=True),
    Setting("FALLBACK", "warn",
            "the opencl device: error turns a CPU fallback into an error, silent drops its warning",
            "the opencl device", ("OCL_FALLBACK",), staff=True),
    Setting("DEVICE_SYNC", "0", "the opencl device: 1 waits for every kernel (to profile operators one by one)",
            "the opencl device", staff=True),
    Setting("DEVICE_ASYNC", "1 on GPUs, 0 on CPU devices and simulators",
            "the opencl device: 1 enqueues launches, copies, library calls and replays from a thread of the "
            "device's own while the program goes on; 0 enqueues each where it is made (errors then surface at the "
            "operator that caused them)", "the opencl device", staff=True),
    Setting("DEVICE_INDEX_CHECKS", "device",
            "the opencl device's index range checks: device checks indices on the device and raises an index out of "
            "range at the next wait for it (as CUDA does); call waits for the check at the operator", "the opencl device",
            staff=True),
    Setting("GRAPH_COMMAND_BUFFERS", "1",
            "the opencl device's recorded steps: 0 replays them as plain enqueues where the device has "
            "cl_khr_command_buffer", "the opencl device", staff=True),
    Setting("COMPILE_REPLAY", "1",
            "torch.compile on the opencl device: 0 runs each compiled graph as its wrapper is written instead of "
            "recording it once and replaying it", "the opencl device's compiler", staff=True),
    Setting("DEVICE_CONV", "auto",
            "the opencl device's convolutions: gpu runs the GPU kernels on any device and computes "
            "gradients as forward convolutions, direct computes gradients with the direct backward kernels",
            "the opencl device", staff=True),
    Setting("DEVICE_MATMUL", "auto",
            "the opencl device's matrix products: gpu runs the few-row kernels of GPUs on any device, "
            "clblast leaves every product to CLBlast",
            "the opencl device", staff=True),
    # The course tools'.
    Setting("BUILD_DEVICE", "1 in package builds, 0 in in-place ones",
            "1: setup.py builds the opencl torch device too; 0: the library alone", "setup.py", staff=True),
    Setting("GRADER_USER", "oclf-sandbox", "the account students' code runs as", "grading", ("GRADER_USER",),
            staff=True),
    Setting("GRADER_PYTHON", "the grader's own, if the account can run it", "the children's interpreter",
            "grading", ("GRADER_PYTHON",), staff=True),
    Setting("GRADER_NAMESPACES", "1 where the machine allows them",
            "0: run steps without PID and mount namespaces (the fallback of containers that forbid them)",
            "grading", staff=True),
    Setting("GRADER_TIMEOUT", "120", "seconds per grading step", "grading", ("GRADER_TIMEOUT",), staff=True),
    Setting("GRADER_BUILD_TIMEOUT", "300", "seconds for the submission's build", "grading",
            ("GRADER_BUILD_TIMEOUT",), staff=True),
    Setting("GRADER_PERF_RUNS", "10", "timed runs per layer", "grading", ("GRADER_PERF_RUNS",), staff=True),
    Setting("GRADER_REF_CACHE", "build/grader-cache", "where the reference and ladder builds are kept", "grading",
            ("GRADER_REF_CACHE",), staff=True),
    Setting("GRADER_WORKDIR", "the system's temporary folder", "where gradings make their temporary folders",
            "grading", ("GRADER_WORKDIR",), staff=True),
    Setting("GRADER_KEEP", "unset", "1: keep a grading's temporary folder", "grading", ("GRADER_KEEP",), staff=True),
    Setting("GRADER_VENV", "/opt/oclf-venv", "the virtualenv of Gradescope's setup.sh and run_autograder",
            "grading/autograder", ("GRADER_VENV",), staff=True),
    Setting("PEAKS", "the spec sheet of the device's model (H100, H200, A100), else none",
            "the benchmarks' peak throughput of the device, as fp32=, tf32=, fp16=, bf16= (TFLOP/s) and bw= (TB/s), "
            "comma-separated: completes or replaces the table of bench/peaks.py", "bench.peaks", staff=True),
    Setting("TORCH_SUITES", "fast", "torch's suites on the opencl device: fast runs the pinned subset, full every "
            "entry of op_db, module_db and optim_db", "tests/torch_suites", staff=True),
    Setting("TORCH_SUITES_LOG", "unset", "a file the torch suites append each test's verdict to (JSON lines; "
            "make torch-suites sets it)", "tests/torch_suites", staff=True),
    # END STAFF
]}


def variable(name: str) -> str:
    """The environment variable that gives setting `name` its value: OCLF_<name> when set,
    else the first alias that is set, else OCLF_<name>."""
    setting = SETTINGS[name]
    for var in (setting.variable, *setting.aliases):
        if os.environ.get(var):
            return var
    return setting.variable


def get(name: str, default: str = "") -> str:
    """The value of setting `name`, read now; `default` when unset or empty."""
    return os.environ.get(variable(name)) or default
