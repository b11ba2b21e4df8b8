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
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List, Optional

from grading.regions import MarkerError, check_no_markers, comment_prefix, strip_regions

ROOT = Path(__file__).resolve().parent.parent

# Paths (files, or folders ending in /) that stay with the staff.
STAFF_ONLY = (
    "STAFF.md",
    "bench/decode.py",
    "bench/micro.py",
    "bench/models.py",
    "bench/peaks.py",
    "bench/peers.py",
    "bench/profile_device.py",
    "bench/record.py",
    "bench/report.py",
    "bench/tune.py",
    "docs/PERFORMANCE.md",
    "docs/device/",
    "docs/staff/",
    "docs/TORCH_SUITES.md",
    "docs/opdb.json",
    "extras/train_ddp.py",
    "extras/validation/accuracy.py",
    "extras/validation/moduledb.py",
    "extras/validation/opdb.py",
    "extras/validation/opdb_child.py",
    "extras/validation/opdb_table.py",
    "extras/validation/torch_suites.py",
    "grading/",
    "torch_opencl/",
    "opencl_functions/device.py",
    "opencl_functions/reference/",
    "torch_opencl_autoload.py",
    "scripts/architecture.py",
    "setup_device.py",
    "tests/test_architecture.py",
    "tests/test_bench_decode.py",
    "tests/test_bench_peers.py",
    "tests/test_conv_paths.py",
    "tests/compile_checks.py",
    "tests/device_checks.py",
    "tests/dtype_checks.py",
    "tests/distributed_worker.py",
    "tests/sweeps.py",
    "tests/test_device_accelerator.py",
    "tests/parallel_worker.py",
    "tests/ddp_amp_worker.py",
    "tests/test_device_ddp_amp.py",
    "tests/test_device_language_models.py",
    "tests/test_device_training.py",
    "tests/special_values.py",
    "tests/test_device_parallel.py",
    "tests/test_device_rng.py",
    "tests/test_device_special_values.py",
    "tests/test_device_torch_utils.py",
    "tests/test_device_accuracy.py",
    "tests/test_device_amp.py",
    "tests/test_device_async.py",
    "tests/test_device_autograd.py",
    "tests/test_device_autoload.py",
    "tests/test_device_compile.py",
    "tests/test_device_compile_groups.py",
    "tests/test_device_compile_networks.py",
    "tests/test_device_compile_replay.py",
    "tests/test_device_compile_dynamic.py",
    "tests/test_device_distributed.py",
    "tests/test_device_dtypes.py",
    "tests/test_device_dtypes_nn.py",
    "tests/test_device_error_types.py",
    "tests/test_torch_suites_driver.py",
    "tests/test_device_edge_cases.py",
    "tests/test_device_fusion.py",
    "tests/test_device_graph.py",
    "tests/test_device_indexing.py",
    "tests/test_device_install.py",
    "tests/test_device_integer_ops.py",
    "tests/test_device_layouts.py",
    "tests/test_device_losses.py",
    "tests/test_device_memory.py",
    "tests/test_device_models.py",
    "tests/test_device_multi.py",
    "tests/test_device_modules.py",
    "tests/test_device_nn.py",
    "tests/test_device_nn_nd.py",
    "tests/test_device_oclgrind.py",
    "tests/test_device_opdb.py",
    "tests/test_device_ops.py",
    "tests/test_device_ops_more.py",
    "tests/test_device_optim.py",
    "tests/test_device_plans.py",
    "tests/test_device_registration.py",
    "tests/test_device_rnn.py",
    "tests/test_device_sort.py",
    "tests/test_device_tensor_cores.py",
    "tests/test_device_tools.py",
    "tests/test_device_transformers.py",
    "tests/test_exploits.py",
    "tests/test_file_sizes.py",
    "tests/test_fixtures.py",
    "tests/test_grading.py",
    "tests/test_handout.py",
    "tests/test_launch_layer.py",
    "tests/test_matmul_paths.py",
    "tests/test_oclgrind.py",
    "tests/oclgrind_checks.py",
    "tests/test_programs.py",
    "tests/programs/",
    "tests/torch_suites/",
    "tests/test_sandbox.py",
    "tests/test_tuning.py",
)
# Exceptions to STAFF_ONLY: parts of grading/ that students may use: the benchmark, the
# allowed-calls check and the Oclgrind check (make run, make check) with what they need
# (the child harness, its pipes, and the process runner the check starts children with and
# its account's bookkeeping), and what a correct result is (the oracle tests.py shares with
# the grader).
PUBLIC_IN_STAFF = (
    "grading/__init__.py",
    "grading/account.py",
    "grading/cases.py",
    "grading/channel.py",
    "grading/check.py",
    "grading/child.py",
    "grading/compare.py",
    "grading/kernel_rules.py",
    "grading/library.py",
    "grading/oracle.py",
    "grading/replay.py",
    "grading/sandbox.py",
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
    if rel in PUBLIC_IN_STAFF:
        return False
    return any(rel == s or (s.endswith("/") and rel.startswith(s)) for s in STAFF_ONLY)


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
