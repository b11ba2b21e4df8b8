"""The trees the grader builds and runs:

- the reference tree: the library, the child harness and the staff kernels, built whole
  as the grader's own user (trusted) and cached by a hash of its sources;
- program trees: a submission (a student's, or a ladder rung's) as its two student files
  over the reference's library, with only opencl-functions.cpp compiled and the
  reference's other objects reused, then the allowed-calls check (grading.symbols) on its
  object. A student's tree holds no staff files: no reference kernels, no ladder kernels.

The ladder's rungs (grading/ladder/*.toml) are built once per reference build, next to it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from grading import fixtures, handout, sandbox, symbols
from grading.workspace import POCL_CACHE, ROOT, Workspace

# The reference tree: the library, the child harness and what the ladder's rungs read.
TREE_FILES = ["setup.py", "opencl_functions", "utils", "grading/__init__.py", "grading/child.py",
              "grading/cases.py", "grading/kernels"]
TREE_SUFFIXES = {".py", ".cpp", ".hpp", ".cl", ".json"}
# A program tree: the library and the child harness only (no staff kernels).
PROGRAM_FILES = ["setup.py", "opencl_functions", "utils", "grading/__init__.py", "grading/child.py",
                 "grading/cases.py"]
# The student's kernel cache starts from a copy of this one, warmed by the ladder's lowest
# rung (public kernels and CLBlast's): the reference's own cache holds the sources of the
# staff kernels (PoCL keeps each program's source beside its binary).
PUBLIC_CACHE = "pocl-cache-public"
STUDENT_FILES = {"opencl-functions.cpp": "opencl_functions", "conv2d.cl": "opencl_functions"}
OBJECT = Path("build/tmp/opencl_functions/opencl-functions.o")
# The student's file is compiled on its own, with only the OpenCL, CLBlast and course headers
# on its include path (no Python, no pybind11), as setup.py would compile it otherwise.
COMPILE = ["g++", "-std=c++17", "-O2", "-fPIC", "-Wall", "-Wno-deprecated-declarations",
           "-DCL_TARGET_OPENCL_VERSION=120", "-Iopencl_functions", "-c", "opencl_functions/opencl-functions.cpp",
           "-o", str(OBJECT)]
# setup.py with a build folder of our own (where the reference's objects are reused from).
BUILD_SNIPPET = (
    "import sys\n"
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

    def _run(self, argv: List[str], tree: Path, user_build: bool) -> sandbox.Result:
        home = tree if not user_build else tree.parent / (tree.name + "-home")
        return sandbox.run(argv, tree, self.ws.env(tree, home), self.ws.limits(self.ws.opt.build_timeout_s),
                           self.ws.user, as_sandbox=user_build)

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
        result = self._run([self.ws.python, "-c", BUILD_SNIPPET], tree, user_build=False)
        if not result.ok:
            raise RuntimeError(f"the reference solution does not build:\n{result.output_tail()}")
        if self.warm is not None:
            self.warm(tree, staging / POCL_CACHE)
        for rung in fixtures.ladder():
            self.ws.log(f"building ladder rung {rung.name}")
            program = self.program(rung.name, rung.files(), staging / "ladder" / rung.name, trusted=True, base=tree)
            if not program.ok:
                raise RuntimeError(f"ladder rung {rung.name} does not build or calls what it may not: "
                                   f"{program.output[-3000:]} {[str(r) for r in program.refusals]}")
        if self.warm is not None:
            baseline = min(fixtures.ladder(), key=lambda rung: rung.share)
            self.warm(self.ladder_tree(tree, baseline.name), staging / PUBLIC_CACHE)
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

    def program(self, name: str, files: Dict[str, str], dest: Path, trusted: bool, base: Path,
                staff: Optional[bool] = None) -> Program:
        """Builds a submission given as its student files' text over the reference tree
        `base`: as the sandbox user unless trusted; with the staff-only files if `staff`
        (by default when trusted). Never raises for what the code does."""
        _copy(base, dest, PROGRAM_FILES, staff=trusted if staff is None else staff)
        for file_name, folder in STUDENT_FILES.items():
            (dest / folder / file_name).write_text(files[file_name])
        for obj in (base / "build" / "tmp").rglob("*.o"):  # the reference's objects of the other files
            if obj.name != OBJECT.name:
                target = dest / obj.relative_to(base)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(obj, target)
        if not trusted:
            sandbox.give_to_sandbox(dest, self.ws.user)
            home = dest.parent / (dest.name + "-home")
            home.mkdir(mode=0o700, exist_ok=True)
            sandbox.give_to_sandbox(home, self.ws.user)
        compiled = self._run(COMPILE, dest, user_build=not trusted)
        if not compiled.ok or not (dest / OBJECT).is_file():
            output = f"The compiler {compiled.describe()}. Its output:\n\n```\n{compiled.output_tail(12000)}\n```"
            return Program(name, dest, False, forbidden_includes(compiled.output) + output, wall_s=compiled.wall_s)
        refusals = symbols.check_object(dest / OBJECT)
        if refusals:
            return Program(name, dest, True, refusals=refusals, wall_s=compiled.wall_s)
        linked = self._run([self.ws.python, "-c", BUILD_SNIPPET], dest, user_build=not trusted)
        built = linked.ok and any((dest / "opencl_functions").glob("_core*.so"))
        return Program(name, dest, built, "" if built else f"Linking {linked.describe()}. Output:\n\n"
                       f"```\n{linked.output_tail(12000)}\n```", wall_s=compiled.wall_s + linked.wall_s)

    def submission(self, files: Dict[str, Path], reference: Path) -> Program:
        """The student's submission, built in the sandbox over the reference tree without its
        staff-only files; its kernel cache starts from a copy of the public warm one."""
        dest = self.ws.work / "student"
        program = self.program("submission", {n: p.read_text(errors="replace") for n, p in files.items()}, dest,
                               trusted=False, base=reference, staff=self.ws.opt.staff_files)
        home = self.home("student")
        # The reference graded as a submission (--staff-files) starts from its own warm cache.
        warm = self.kernel_cache(reference) if self.ws.opt.staff_files else self.public_kernel_cache(reference)
        if warm.is_dir():
            shutil.copytree(warm, home / POCL_CACHE, symlinks=False, dirs_exist_ok=True)
            sandbox.give_to_sandbox(home, self.ws.user)
        return program

    def home(self, name: str) -> Path:
        """The home folder of a program's children (made once, owned by whoever runs them)."""
        home = self.ws.work / f"{name}-home"
        if not home.exists():
            home.mkdir(mode=0o700)
            if name == "student":
                sandbox.give_to_sandbox(home, self.ws.user)
        return home
