"""The student handout, made from the reference tree:

    python -m grading.handout --out build/handout      (make handout)

Copies the project's files (tracked and untracked-but-not-ignored, as git lists them),
leaving out the staff-only ones (STAFF_ONLY), and writes each file's handout view
(grading.regions): solution regions become their prompt (or one TODO line), staff-only
regions vanish, and no marker reaches the handout. Bad markers raise MarkerError naming
file:line, before anything is written.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List, Optional

from grading.regions import MarkerError, check_no_markers, comment_prefix, strip_regions

ROOT = Path(__file__).resolve().parent.parent

# What stays with the staff: files, folders (ending in /) and patterns of file names
# (fnmatch's, where * crosses folders too).
#
# The opencl torch device, whole: its package (torch_opencl/, and the shim that kept its old
# name, in either form), its build and autoload, its tests, tools, documents and validation
# harnesses.
DEVICE = (
    "torch_opencl/",
    "torch_opencl_autoload.py",
    "opencl_functions/device.py",
    "opencl_functions/device/",
    "opencl_functions_autoload.py",
    "setup_device.py",
    "tests/test_device_*.py",
    "tests/device_*.py",
    "tests/compile_checks.py",
    "tests/dtype_checks.py",
    "tests/special_values.py",
    "tests/ddp_amp_worker.py",
    "tests/distributed_worker.py",
    "tests/parallel_worker.py",
    "tests/test_bench_decode.py",
    "tests/test_programs.py",
    "tests/programs/",
    "tests/test_torch_suites*.py",
    "tests/torch_suites/",
    "bench/decode.py",
    "bench/first_call.py",
    "bench/micro.py",
    "bench/models.py",
    "bench/ops.py",
    "bench/profile_device.py",
    "docs/device/",
    "docs/TORCH_SUITES.md",
    "docs/opdb.json",
    "extras/train_ddp.py",
    "extras/validation/accuracy.py",
    "extras/validation/moduledb.py",
    "extras/validation/opdb.py",
    "extras/validation/opdb_child.py",
    "extras/validation/opdb_table.py",
    "extras/validation/torch_suites.py",
)
# The reference's fast paths, the grader, and the staff's tools, tests and documents.
STAFF = (
    "STAFF.md",
    "bench/peaks.py",
    "bench/peers.py",
    "bench/record.py",
    "bench/report.py",
    "bench/tune.py",
    "docs/PERFORMANCE.md",
    "docs/staff/",
    "grading/",
    "opencl_functions/reference/",
    "scripts/architecture.py",
    "tests/oclgrind_checks.py",
    "tests/sweeps.py",
    "tests/test_architecture.py",
    "tests/test_bench_peers.py",
    "tests/test_conv_paths.py",
    "tests/test_exploits.py",
    "tests/test_file_sizes.py",
    "tests/test_fixtures.py",
    "tests/test_grading.py",
    "tests/test_handout.py",
    "tests/test_launch_layer.py",
    "tests/test_matmul_paths.py",
    "tests/test_oclgrind.py",
    "tests/test_sandbox.py",
    "tests/test_tuning.py",
)
STAFF_ONLY = DEVICE + STAFF
# Exceptions to STAFF_ONLY: parts of grading/ that students may use: the benchmark, the
# allowed-calls check and the Oclgrind check (make run, make check) with what they need
# (the child harness, its pipes and the process runner the check starts children with), and
# what a correct result is (the oracle tests.py shares with the grader).
PUBLIC_IN_STAFF = (
    "grading/__init__.py",
    "grading/cases.py",
    "grading/channel.py",
    "grading/check.py",
    "grading/child.py",
    "grading/compare.py",
    "grading/kernel_rules.py",
    "grading/library.py",
    "grading/oracle.py",
    "grading/process.py",
    "grading/replay.py",
    "grading/scale.py",
    "grading/symbols.py",
    "grading/kernels/conv2d_naive.cl",
)


def project_files(root: Path = ROOT) -> List[str]:
    """Tracked files plus untracked ones git does not ignore, relative to root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root, check=True, capture_output=True,
    ).stdout.decode()
    return sorted(p for p in set(listed.split("\0")) if p and (root / p).is_file())


def is_staff_only(rel: str) -> bool:
    """Whether the project file `rel` (relative to the root, with /) stays with the staff."""
    if rel in PUBLIC_IN_STAFF:
        return False
    return any(rel.startswith(s) if s.endswith("/") else fnmatch.fnmatchcase(rel, s) for s in STAFF_ONLY)


def make_handout(out: Path, root: Path = ROOT, files: Optional[Iterable[str]] = None) -> List[str]:
    """Writes the handout tree to `out` (replaced if it exists); returns the files written."""
    files = [f for f in (project_files(root) if files is None else files) if not is_staff_only(f)]
    # Transform everything first, so a bad marker leaves no half-written tree.
    contents = {}
    for rel in files:
        src = root / rel
        data = src.read_bytes()
        try:
            text = data.decode()
        except UnicodeDecodeError:
            contents[rel] = data
            continue
        prefix = comment_prefix(src)
        if prefix:
            text = strip_regions(text, rel, prefix)
        check_no_markers(text, rel)
        contents[rel] = text.encode()
    if out.exists():
        shutil.rmtree(out)
    for rel, data in contents.items():
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        shutil.copymode(root / rel, dst)
    return sorted(contents)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "handout", help="output folder (replaced)")
    args = parser.parse_args(argv)
    try:
        written = make_handout(args.out)
    except MarkerError as err:
        print(f"handout: {err}", file=sys.stderr)
        return 1
    print(f"handout: {len(written)} files in {os.path.relpath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
