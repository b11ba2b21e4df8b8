"""Where one grading happens: its temporary folder, the sandbox account and interpreter,
the grader's options, and how a step's child process is started there (environment,
limits, input and output files). Shared by the build, correctness, Oclgrind and
performance steps.
"""
from __future__ import annotations

import os
import pwd
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch

from grading import sandbox
from utils import config

ROOT = Path(__file__).resolve().parent.parent
POCL_CACHE = "pocl-cache"
# The environment a child may inherit from the grader: device choice only.
PASSED_ENV = ("OCLF_DEVICE", "OCL_DEVICE", "OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "POCL_DEVICES",
              "CUDA_VISIBLE_DEVICES")


@dataclass
class Options:
    """The grader's knobs: flags, or settings (utils.config: OCLF_GRADER_*, read when made)."""

    timeout_s: float = field(default_factory=lambda: float(config.get("GRADER_TIMEOUT", "120")))
    build_timeout_s: float = field(default_factory=lambda: float(config.get("GRADER_BUILD_TIMEOUT", "300")))
    perf_runs: int = field(default_factory=lambda: int(config.get("GRADER_PERF_RUNS", "10")))
    ref_cache: Optional[Path] = field(
        default_factory=lambda: Path(config.get("GRADER_REF_CACHE") or ROOT / "build" / "grader-cache"))
    quiet: bool = False
    keep: bool = field(default_factory=lambda: bool(config.get("GRADER_KEEP")))
    # Build the submission over the whole reference tree, staff-only headers and kernels
    # included: for grading the reference itself (a flag of grading.grade, never a setting).
    staff_files: bool = False


class Workspace:
    """One grading's temporary folder and the way children run in it."""

    def __init__(self, options: Options) -> None:
        self.opt = options
        self.start = time.monotonic()
        self.user: Optional[pwd.struct_passwd] = sandbox.sandbox_user()
        self.python, self.extra_path = sandbox.python_for(self.user)
        self.work = Path(tempfile.mkdtemp(prefix="oclf-grade-", dir=config.get("GRADER_WORKDIR") or None))
        os.chmod(self.work, 0o711)  # children may pass through to their own folders, not list it

    def log(self, message: str) -> None:
        if not self.opt.quiet:
            print(f"[grade {time.monotonic() - self.start:6.1f}s] {message}", flush=True)

    def folder(self, prefix: str, for_sandbox: bool = False) -> Path:
        """A new private folder under the work folder (owned by the sandbox user if asked)."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.work))
        if for_sandbox:
            sandbox.give_to_sandbox(path, self.user)
        return path

    def env(self, tree: Path, home: Path, kernel_cache: Optional[Path] = None) -> Dict[str, str]:
        """The whole environment of a child: nothing of the grader's own leaks in."""
        env = {
            "PATH": os.path.dirname(self.python) + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "POCL_CACHE_DIR": str(kernel_cache or home / POCL_CACHE),
            "PYOPENCL_NO_CACHE": "1",
            "PYTHONPATH": os.pathsep.join([str(tree)] + self.extra_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            # torch in a child only fills and copies small tensors: its idle OpenMP workers
            # would spin and take cores from the OpenCL device's threads.
            "OMP_NUM_THREADS": "1",
            # The reference's kernels take their device-derived defaults: a grading never
            # measures configurations (its timings and the ladder's scale stay stable).
            "OCLF_TUNE": "0",
        }
        env.update({name: os.environ[name] for name in PASSED_ENV if name in os.environ})
        return env

    def limits(self, timeout_s: Optional[float] = None) -> sandbox.Limits:
        return sandbox.Limits(timeout_s=timeout_s or self.opt.timeout_s)

    def io_folder(self, step: str, inputs: Dict, trusted: bool) -> Tuple[Path, Path]:
        """Writes a step's inputs where its child can read them; returns (inputs file,
        output folder the child may write)."""
        io_dir = Path(tempfile.mkdtemp(prefix=f"io-{step}-", dir=self.work))
        os.chmod(io_dir, 0o711)
        inputs_path = io_dir / "inputs.pt"
        torch.save(inputs, inputs_path)
        os.chmod(inputs_path, 0o644)
        out_dir = io_dir / "out"
        out_dir.mkdir(mode=0o700)
        if not trusted:
            sandbox.give_to_sandbox(out_dir, self.user)
        return inputs_path, out_dir

    def start_child(self, step: str, inputs: Dict, tree: Path, home: Path, trusted: bool = False,
                    kernel_cache: Optional[Path] = None, extra_args: Sequence[str] = (),
                    pass_fds: Sequence[int] = (), timeout_s: Optional[float] = None,
                    wrapper: Sequence[str] = ()) -> Tuple[sandbox.Running, Path]:
        """Starts `python -m grading.child STEP INPUTS OUTDIR ...` in `tree` (as the sandbox
        user unless trusted); returns the running step and its output folder."""
        inputs_path, out_dir = self.io_folder(step, inputs, trusted)
        argv = [*wrapper, self.python, "-m", "grading.child", step, str(inputs_path), str(out_dir), *extra_args]
        running = sandbox.start(argv, tree, self.env(tree, home, kernel_cache), self.limits(timeout_s), self.user,
                                as_sandbox=not trusted, pass_fds=pass_fds)
        return running, out_dir

    def run_child(self, step: str, inputs: Dict, tree: Path, home: Path, trusted: bool = False,
                  kernel_cache: Optional[Path] = None, timeout_s: Optional[float] = None,
                  wrapper: Sequence[str] = ()) -> Tuple[sandbox.Result, Path]:
        running, out_dir = self.start_child(step, inputs, tree, home, trusted, kernel_cache, timeout_s=timeout_s,
                                            wrapper=wrapper)
        return running.finish(), out_dir
