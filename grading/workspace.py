"""Where one grading happens: its temporary folder, the sandbox account and interpreter,
the grader's options, and how a step's child process is started there (environment,
limits, scratch folder, pipes). Shared by the build, correctness, race and performance
steps.

What a submission's step can touch: its program tree, read-only (owned by the grader);
one scratch folder of its own (HOME, TMPDIR and its kernel cache), made empty for the
step and removed after it; the two pipes of grading.channel. With namespaces, it sees
nothing of the grader's checkout or reference builds (grading/jail.py).
"""
from __future__ import annotations

import os
import pwd
import shutil
import site
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from grading import sandbox
from grading.channel import Child, spawn
from grading.library import settings

ROOT = Path(__file__).resolve().parent.parent
POCL_CACHE = "pocl-cache"
# The environment a child may inherit from the grader: device choice only.
PASSED_ENV = ("OCLF_DEVICE", "OCL_DEVICE", "OCL_ICD_VENDORS", "OCL_ICD_FILENAMES", "POCL_DEVICES",
              "CUDA_VISIBLE_DEVICES")


@dataclass
class Options:
    """The grader's knobs: flags, or settings (opencl_functions/settings.py: OCLF_GRADER_*, read when made)."""

    timeout_s: float = field(default_factory=lambda: float(settings.get("GRADER_TIMEOUT", "120")))
    build_timeout_s: float = field(default_factory=lambda: float(settings.get("GRADER_BUILD_TIMEOUT", "300")))
    perf_runs: int = field(default_factory=lambda: int(settings.get("GRADER_PERF_RUNS", "10")))
    ref_cache: Optional[Path] = field(
        default_factory=lambda: Path(settings.get("GRADER_REF_CACHE") or ROOT / "build" / "grader-cache"))
    quiet: bool = False
    keep: bool = field(default_factory=lambda: bool(settings.get("GRADER_KEEP")))
    # Build the submission over the whole reference tree, staff-only headers and kernels
    # included: for grading the reference itself (a flag of grading.grade, never a setting).
    staff_files: bool = False


def seal(path: Path) -> None:
    """Makes a tree the grader's and read-only for everyone else: owned by this process's
    user, folders 0755, files 0644 (0755 where executable), no links followed."""
    uid, gid = os.getuid(), os.getgid()
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, uid, gid)
        os.chmod(dirpath, 0o755)
        for name in filenames:
            file = os.path.join(dirpath, name)
            if os.path.islink(file):
                os.unlink(file)
                continue
            os.chown(file, uid, gid)
            os.chmod(file, 0o755 if os.stat(file).st_mode & 0o111 else 0o644)


class Workspace:
    """One grading's temporary folder and the way children run in it."""

    def __init__(self, options: Options) -> None:
        self.opt = options
        self.start = time.monotonic()
        self.user: Optional[pwd.struct_passwd] = sandbox.sandbox_user()
        self.python, self.extra_path = sandbox.python_for(self.user)
        self.work = Path(tempfile.mkdtemp(prefix="oclf-grade-", dir=settings.get("GRADER_WORKDIR") or None))
        os.chmod(self.work, 0o711)  # children may pass through to their own folders, not list it

    def log(self, message: str) -> None:
        if not self.opt.quiet:
            print(f"[grade {time.monotonic() - self.start:6.1f}s] {message}", flush=True)

    def folder(self, prefix: str) -> Path:
        """A new private folder of the grader's under the work folder."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self.work))

    def scratch(self, warm_cache: Optional[Path] = None) -> Path:
        """A new empty folder for one sandboxed step, the only one it may write (its HOME,
        TMPDIR and kernel cache, which starts as a copy of warm_cache when given)."""
        path = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.work))
        if warm_cache is not None and warm_cache.is_dir():
            shutil.copytree(warm_cache, path / POCL_CACHE, symlinks=False)
        sandbox.give_to_sandbox(path, self.user)
        return path

    def view(self, visible: Sequence[Path]) -> sandbox.View:
        """What a sandboxed step sees: the grader's checkout, reference builds and the
        machine's temporary folders hidden, but
        for the interpreter's environment and the step's own folders (`visible`; the last
        one writable: its scratch)."""
        # The machine's temporary folders too: other users' files lie there (the step's own
        # folders under them are bound back). The shared writable ones (/dev/shm, /run/lock)
        # become the step's own, empty: it must find nothing an earlier step left there.
        hide = [ROOT, Path(tempfile.gettempdir()), Path("/var/tmp")] + ([self.opt.ref_cache] if self.opt.ref_cache else [])
        python_dirs = {sys.prefix, os.path.dirname(os.path.realpath(self.python)), *self.extra_path,
                       *site.getsitepackages()}
        keep = [(p, False) for p in sorted(python_dirs)]
        keep += [(str(p), i == len(visible) - 1) for i, p in enumerate(visible)]
        folders = sorted({str(p.resolve()) for p in hide if p.exists()})
        # A folder inside another hidden one is hidden with it.
        folders = [f for f in folders if not any(f.startswith(other + "/") for other in folders)]
        private = [f for f in sandbox.SHARED_FOLDERS if os.path.isdir(f)]
        return sandbox.View(hide=folders, keep=keep, private=private)

    def env(self, tree: Path, home: Path, kernel_cache: Path) -> Dict[str, str]:
        """The whole environment of a child: nothing of the grader's own leaks in."""
        env = {
            "PATH": os.path.dirname(self.python) + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "POCL_CACHE_DIR": str(kernel_cache),
            "PYTHONPATH": os.pathsep.join([str(tree)] + self.extra_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
            # torch in a child only fills and copies small tensors: its idle OpenMP workers
            # would spin and take cores from the OpenCL device's threads.
            "OMP_NUM_THREADS": "1",
            # The reference's kernels take their device-derived defaults: a grading never
            # measures configurations (its timings and the ladder's scale stay stable).
            "OCLF_TUNE": "0",
            # Students' code runs with the library alone: torch loads no backend extension
            # (an installed opencl_functions would bring the staff's device with it).
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
            # Every program is built from the source the launch log records: no binary kept by
            # an earlier process (a file the submission could have written) is ever loaded.
            "OCLF_PROGRAM_CACHE": "0",
        }
        env.update({name: os.environ[name] for name in PASSED_ENV if name in os.environ})
        return env

    def limits(self, timeout_s: Optional[float] = None) -> sandbox.Limits:
        return sandbox.Limits(timeout_s=timeout_s or self.opt.timeout_s)

    def run_sandboxed(self, argv: List[str], tree: Path, timeout_s: float, warm_cache: Optional[Path] = None
                      ) -> sandbox.Result:
        """Runs a command of the submission's (its build) in `tree` with a scratch folder."""
        scratch = self.scratch(warm_cache)
        try:
            return sandbox.run(argv, tree, self.env(tree, scratch, scratch / POCL_CACHE), self.limits(timeout_s),
                               self.user, view=self.view([tree, scratch]))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def trusted_home(self) -> Path:
        """HOME and TMPDIR of what runs as the grader (the ladder's rungs): private to it."""
        home = self.work / "trusted-home"
        home.mkdir(mode=0o700, exist_ok=True)
        return home

    def start_child(self, module: str, args: Sequence[str], tree: Path, trusted: bool, kernel_cache: Path,
                    timeout_s: Optional[float] = None, wrapper: Sequence[str] = (),
                    extra_fds: Sequence[int] = ()) -> Child:
        """Starts `python -m MODULE ARGS... IN_FD OUT_FD` (behind `wrapper`, if any) in
        `tree`. A trusted child (a ladder rung) runs as the grader with the reference's warm
        kernel cache; any other as the sandbox user, with a scratch folder whose kernel cache
        starts as a copy of kernel_cache."""
        argv = [*wrapper, self.python, "-m", module, *args]
        if trusted:
            env = self.env(tree, self.trusted_home(), kernel_cache)
            return spawn(lambda a, fds: sandbox.start(a, tree, env, self.limits(timeout_s), self.user,
                                                      as_sandbox=False, pass_fds=fds), argv, extra_fds)
        scratch = self.scratch(kernel_cache)
        env = self.env(tree, scratch, scratch / POCL_CACHE)
        try:
            return spawn(lambda a, fds: sandbox.start(a, tree, env, self.limits(timeout_s), self.user, pass_fds=fds,
                                                      view=self.view([tree, scratch])), argv, extra_fds, scratch)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise


    def starter(self, tree: Path, kernel_cache: Path, trusted: bool = False):
        """start(module, args, wrapper=(), extra_fds=(), timeout_s=None) for children of `tree`
        (grading.check's Starter)."""
        def start(module: str, args: Sequence[str], wrapper: Sequence[str] = (), extra_fds: Sequence[int] = (),
                  timeout_s: Optional[float] = None) -> Child:
            return self.start_child(module, args, tree, trusted, kernel_cache, timeout_s, wrapper, extra_fds)
        return start
