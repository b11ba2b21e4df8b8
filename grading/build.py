"""The trees the grader builds and runs:

- the reference tree: the library, the child harness and the staff kernels, built whole
  as the grader's own user (trusted) and cached by a hash of its sources;
- program trees: a submission (a student's, or a ladder rung's) as its two student files
  over the reference's library, with only opencl-functions.cpp compiled and the
  reference's other objects reused, then the allowed-calls check (grading.symbols) on its
  object. A student's tree holds no staff files: no reference kernels, no ladder kernels.
  A submission is built in a scratch folder of the sandbox's; the grader then copies the
  built module into a tree of its own, which no step can write: everything the grader's
  children run and import (the harness, the library, the module) is read-only to them.

The ladder's rungs (grading/ladder/*.toml) are built once per reference build, next to it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from grading import fixtures, handout, sandbox, symbols
from grading.workspace import POCL_CACHE, ROOT, Workspace, seal

# The reference tree: the library (with its staff folder opencl_functions/reference/: the
# reference's kernels and host code, read and compiled where they lie), the child harness and
# what the ladder's rungs read.
HARNESS = ["grading/__init__.py", "grading/channel.py", "grading/child.py", "grading/cases.py",
           "grading/oracle.py", "grading/library.py", "grading/replay.py", "grading/kernel_rules.py"]
# make grade's measurement (grading.calibrate runs it in each rung's tree for the tiers).
ESTIMATE = ["bench/__init__.py", "bench/estimate.py", "bench/baselines.py", "grading/scale.py",
            "grading/kernels/conv2d_naive.cl"]
TREE_FILES = ["setup.py", "opencl_functions", "utils", *HARNESS, *ESTIMATE, "grading/kernels"]
TREE_SUFFIXES = {".py", ".cpp", ".hpp", ".cl", ".h", ".json"}
# A program tree: the library and the child harness only; without --staff-files, _copy
# leaves out the staff-only folders (handout.STAFF_ONLY: opencl_functions/reference/ and
# torch_opencl/), so a student's program has no staff kernel to read or include.
PROGRAM_FILES = ["setup.py", "opencl_functions", "utils", *HARNESS, *ESTIMATE]
# The student's kernel cache starts from a copy of this one, warmed by the ladder's lowest
# rung (public kernels and CLBlast's): the reference's own cache holds the sources of the
# staff kernels (PoCL keeps each program's source beside its binary).
PUBLIC_CACHE = "pocl-cache-public"
STUDENT_FILES = {"opencl-functions.cpp": "opencl_functions", "conv2d.cl": "opencl_functions"}
OBJECT = Path("build/tmp/opencl_functions/opencl-functions.o")
DEPENDENCIES = OBJECT.with_suffix(".d")  # the headers the compiler read (-MD), for the allowed-calls check
# The student's file is compiled on its own, with only the OpenCL, CLBlast and course headers
# on its include path (no Python, no pybind11), as setup.py would compile it otherwise.
COMPILE = ["g++", "-std=c++17", "-O2", "-fPIC", "-Wall", "-Wno-deprecated-declarations",
           "-DCL_TARGET_OPENCL_VERSION=120", "-Iopencl_functions", "-MD", "-MF", str(DEPENDENCIES), "-c",
           "opencl_functions/opencl-functions.cpp", "-o", str(OBJECT)]
# setup.py with a build folder of our own (where the reference's objects are reused from).
BUILD_SNIPPET = (
    "import os, sys\n"
    "__file__ = os.path.abspath('setup.py')  # setup.py finds its folder by it\n"
    "sys.argv = ['setup.py', '-q', 'build_ext', '--inplace', '--build-temp', 'build/tmp']\n"
    "exec(compile(open('setup.py').read(), 'setup.py', 'exec'))\n"
)


def _sources(root: Path, names: List[str]) -> List[Path]:
    paths = []
    for rel in names:
        src = root / rel
        paths += [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.suffix in TREE_SUFFIXES)
    return paths


def _copy(src_root: Path, dst: Path, names: List[str], staff: bool = True) -> None:
    """Copies the sources under names; staff=False leaves out the staff-only files (the
    reference's fast paths), which a student's program must not be able to include."""
    for p in _sources(src_root, names):
        rel = p.relative_to(src_root)
        if not staff and handout.is_staff_only(rel.as_posix()):
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)


def sources_hash() -> str:
    """What the reference build and the ladder depend on: their sources, the ladder's
    fixtures, Python's and torch's versions."""
    h = hashlib.sha256()
    paths = _sources(ROOT, TREE_FILES) + sorted(fixtures.LADDER_DIR.glob("*.toml"))
    for p in paths:
        h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(sys.version.encode() + torch.__version__.encode())
    return h.hexdigest()[:16]


# Headers the student's include path leaves out on purpose, and why.
FORBIDDEN_HEADERS = re.compile(r"fatal error: ((pybind11|torch|ATen|c10)/[\w/.]+|Python\.h)")


def forbidden_includes(compiler_output: str) -> str:
    """One line per header the grader's include path refuses, saying what is not allowed and
    why ("" when the build failed for another reason)."""
    found = sorted({m.group(1) for m in FORBIDDEN_HEADERS.finditer(compiler_output)})
    return "".join(f"Not allowed: `#include <{h}>`: the host code may use the OpenCL, CLBlast and course headers "
                   f"only (the convolution must run in your own OpenCL kernel).\n\n" for h in found)


@dataclass
class Program:
    """A built submission: its tree, and whether it built and passed the allowed-calls check."""

    name: str
    tree: Path
    built: bool
    output: str = ""  # the compiler's output when the build failed
    refusals: List[symbols.Refusal] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.built and not self.refusals


class Builder:
    """Builds the reference, the ladder and submissions for one grading."""

    def __init__(self, ws: Workspace, warm: Optional[Callable[[Path, Path], None]] = None) -> None:
        """warm(tree, kernel_cache) fills a new reference build's kernel cache, if given."""
        self.ws, self.warm = ws, warm

    def _run(self, argv: List[str], folder: Path, trusted: bool) -> sandbox.Result:
        """A build command in `folder`: as the grader when trusted, else in the sandbox with
        `folder` as its only writable place."""
        timeout = self.ws.opt.build_timeout_s
        if trusted:
            return sandbox.run(argv, folder, self.ws.env(folder, folder, folder / POCL_CACHE),
                               self.ws.limits(timeout), self.ws.user, as_sandbox=False)
        return sandbox.run(argv, folder, self.ws.env(folder, folder, folder / POCL_CACHE), self.ws.limits(timeout),
                           self.ws.user, view=self.ws.view([folder]))

    def reference(self) -> Path:
        """The reference tree, built as the grader's own user and readable by it alone; with
        a cache folder, a build of the same sources is reused (the ladder is built with it)."""
        cache = self.ws.opt.ref_cache
        if cache:
            home = cache / sources_hash()
            if (home / "ready").exists():
                self.ws.log("reference and ladder builds: cached")
                return home / "reference"
            cache.mkdir(parents=True, exist_ok=True)
            os.chmod(cache, 0o700)
        else:
            home = self.ws.work / "reference-build"
        self.ws.log("building the reference solution")
        staging = Path(tempfile.mkdtemp(prefix="ref-", dir=home.parent))
        os.chmod(staging, 0o700)
        tree = staging / "reference"
        _copy(ROOT, tree, TREE_FILES)
        result = self._run([self.ws.python, "-c", BUILD_SNIPPET], tree, trusted=True)
        if not result.ok:
            raise RuntimeError(f"the reference solution does not build:\n{result.output_tail()}")
        # The reference's kernel cache warms (a child compiling kernels on one core) while the
        # ladder builds and the baseline rung's cache warms: two caches, two processes.
        with ThreadPoolExecutor(max_workers=1) as background:
            warming = background.submit(self.warm, tree, staging / POCL_CACHE) if self.warm is not None else None
            for rung in fixtures.ladder():
                self.ws.log(f"building ladder rung {rung.name}")
                program = self.program(rung.name, rung.files(), staging / "ladder" / rung.name, trusted=True,
                                       base=tree)
                if not program.ok:
                    raise RuntimeError(f"ladder rung {rung.name} does not build or calls what it may not: "
                                       f"{program.output[-3000:]} {[str(r) for r in program.refusals]}")
            if self.warm is not None:
                baseline = min(fixtures.ladder(), key=lambda rung: rung.share)
                self.warm(self.ladder_tree(tree, baseline.name), staging / PUBLIC_CACHE)
            if warming is not None:
                warming.result()
        (staging / "ready").touch()  # the ladder's "reference" rung is a program like the others
        if home.exists():
            shutil.rmtree(home)
        staging.rename(home)
        if cache:  # builds of older grader or reference sources are stale now
            for old in cache.iterdir():
                if old != home and len(old.name) == 16 and all(c in "0123456789abcdef" for c in old.name):
                    shutil.rmtree(old, ignore_errors=True)
        return home / "reference"

    @staticmethod
    def ladder_tree(reference: Path, name: str) -> Path:
        return reference.parent / "ladder" / name

    @staticmethod
    def kernel_cache(reference: Path) -> Path:
        """The warm kernel cache of a reference build, shared by the ladder's rungs."""
        return reference.parent / POCL_CACHE

    @staticmethod
    def public_kernel_cache(reference: Path) -> Path:
        """The warm kernel cache a submission's copy starts from (no staff kernel in it)."""
        return reference.parent / PUBLIC_CACHE

    def _lay_out(self, folder: Path, files: Dict[str, str], base: Path, staff: bool) -> None:
        """The library's files from `base` with a submission's student files over them."""
        _copy(base, folder, PROGRAM_FILES, staff=staff)
        for file_name, sub in STUDENT_FILES.items():
            (folder / sub / file_name).write_text(files[file_name])

    def program(self, name: str, files: Dict[str, str], dest: Path, trusted: bool, base: Path,
                staff: Optional[bool] = None) -> Program:
        """Builds a submission given as its student files' text over the reference tree
        `base` (as the sandbox user unless trusted; with the staff-only files if `staff`, by
        default when trusted), then installs it into `dest`: a tree of the grader's, which
        no step can write, holding the library, the student files and the built module.
        Never raises for what the code does."""
        staff = trusted if staff is None else staff
        work = self.ws.folder("build-") if trusted else self.ws.scratch()
        try:
            self._lay_out(work, files, base, staff)
            for obj in (base / "build" / "tmp").rglob("*.o"):  # the reference's objects of the other files
                if obj.name != OBJECT.name:
                    target = work / obj.relative_to(base)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(obj, target)
            if not trusted:
                sandbox.give_to_sandbox(work, self.ws.user)
            compiled = self._run(COMPILE, work, trusted)
            if not compiled.ok or not (work / OBJECT).is_file():
                output = f"The compiler {compiled.describe()}. Its output:\n\n```\n{compiled.output_tail(12000)}\n```"
                return Program(name, dest, False, forbidden_includes(compiled.output) + output,
                               wall_s=compiled.wall_s)
            refusals = symbols.check_object(work / OBJECT) + symbols.header_refusals(work / DEPENDENCIES)
            if refusals:
                return Program(name, dest, True, refusals=refusals, wall_s=compiled.wall_s)
            linked = self._run([self.ws.python, "-c", BUILD_SNIPPET], work, trusted)
            module = built_module(work)
            if not linked.ok or module is None:
                return Program(name, dest, False, f"Linking {linked.describe()}. Output:\n\n"
                               f"```\n{linked.output_tail(12000)}\n```", wall_s=compiled.wall_s + linked.wall_s)
            self._lay_out(dest, files, base, staff)
            copy_module(module, dest / "opencl_functions" / module.name)
            seal(dest)
            return Program(name, dest, True, wall_s=compiled.wall_s + linked.wall_s)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def submission(self, files: Dict[str, Path], reference: Path) -> Program:
        """The student's submission, built in the sandbox over the reference tree without its
        staff-only files."""
        return self.program("submission", {n: p.read_text(errors="replace") for n, p in files.items()},
                            self.ws.work / "student", trusted=False, base=reference, staff=self.ws.opt.staff_files)

    def submission_cache(self, reference: Path) -> Path:
        """The warm kernel cache a submission's steps start from: the public one, or the
        reference's own when the reference itself is graded (--staff-files)."""
        return self.kernel_cache(reference) if self.ws.opt.staff_files else self.public_kernel_cache(reference)


MODULE_LIMIT = 512 * 1024 * 1024


def built_module(folder: Path) -> Optional[Path]:
    """The module a build made in `folder` (a plain file inside it), or None."""
    found = [p for p in (folder / "opencl_functions").glob("_core*.so")
             if not p.is_symlink() and p.resolve().parent == (folder / "opencl_functions").resolve()]
    return found[0] if len(found) == 1 else None


def copy_module(src: Path, dst: Path) -> None:
    """Copies a built module out of a sandbox-written folder: not through a link, a plain
    file, within MODULE_LIMIT bytes."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MODULE_LIMIT:
            raise RuntimeError(f"the built module {src.name} is not a plain file of a sane size")
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "wb") as out:
            shutil.copyfileobj(f, out)
    os.chmod(dst, 0o755)
