"""The project's layers, drawn from its code: which layer imports or includes which.

    python scripts/architecture.py            print the picture
    python scripts/architecture.py --write    put it into ARCHITECTURE.md (between its markers)
    python scripts/architecture.py --check    exit 1 if an arrow points up (tests run this)

Every tracked source file belongs to one layer (LAYERS, bottom first, each a list of path
prefixes; the longest prefix wins). An arrow is a Python `import`/`from ... import` of a
project module or a C++ `#include "..."` of a project header; an arrow from a layer to one
above it is a layer leaning upward, and --check (tests/test_architecture.py) fails on it.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
MARK_BEGIN, MARK_END = "<!-- BEGIN LAYERS (scripts/architecture.py) -->", "<!-- END LAYERS -->"

# Bottom first: (name, path prefixes, what it is).
LAYERS: List[Tuple[str, List[str], str]] = [
    ("runtime", ["opencl_functions/runtime/"], "the OpenCL runtime: device, programs, buffers, launches, settings"),
    ("launch", ["opencl_functions/launch/"], "Conv2dGeometry, the Launcher and the shared gradient launches"),
    ("interface", ["opencl_functions/opencl-functions.hpp"], "what the student's host code implements"),
    ("reference", ["opencl_functions/reference/"], "the reference's kernels and launches (staff)"),
    ("host code", ["opencl_functions/opencl-functions.cpp", "opencl_functions/conv2d.cl",
                   "opencl_functions/backward.", "opencl_functions/conv2d_backward.cl",
                   "opencl_functions/baselines."], "the student's files, the gradients, the baselines"),
    ("bindings", ["opencl_functions/bindings"], "the pybind11 module _core: operations, and the runtime's side"),
    ("library", ["opencl_functions/"], "the torch-facing package: checks, ops, resident, settings"),
    ("device", ["torch_opencl/", "torch_opencl_autoload.py", "opencl_functions/device.py"],
     "PyTorch's opencl device, torch_opencl (staff); opencl_functions.device its former name"),
    ("utils", ["utils/"], "the patched layers: nn.Conv2d's forward, autograd ops, opencl_layers()"),
    ("grading", ["grading/"], "the autograder, make check, make grade, the handout"),
    ("bench", ["bench/"], "benchmarks, tuning and profiling tools"),
    ("programs", ["tests.py", "tests/", "extras/", "scripts/", "simple_sanity_check.py", "inference_",
                  "conftest.py", "setup.py", "setup_device.py",
                  "grading/bench.py", "grading/e2e.py"],  # the old names of two bench commands
     "demos, tests, extras, build scripts, old command names"),
]
SUFFIXES = {".py", ".cpp", ".hpp", ".h", ".cl"}


def layer_of(rel: str) -> Optional[str]:
    best = None
    for name, prefixes, _ in LAYERS:
        for prefix in prefixes:
            if rel.startswith(prefix) and (best is None or len(prefix) > best[1]):
                best = (name, len(prefix))
    return best[0] if best else None


def _python_targets(path: Path) -> Set[str]:
    """Project files a Python file imports (modules or packages that exist in the tree)."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            module = ".".join(base.relative_to(ROOT).parts + ((node.module,) if node.module else ()))
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    found = set()
    if "opencl_functions._core" in names or (path.parent.name == "opencl_functions" and "opencl_functions._core"
                                              in {f"opencl_functions.{n}" for n in names}):
        found.add("opencl_functions/bindings.cpp")  # the compiled module
    for name in names:
        rel = name.replace(".", "/")
        for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
            if (ROOT / candidate).is_file():
                found.add(candidate)
    return found


def _cpp_targets(path: Path) -> Set[str]:
    found = set()
    for header in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(errors="replace"), re.M):
        for base in (path.parent, ROOT / "opencl_functions", ROOT):
            candidate = (base / header).resolve()
            if candidate.is_file() and ROOT in candidate.parents:
                found.add(candidate.relative_to(ROOT).as_posix())
                break
    return found


def sources() -> List[str]:
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return [p for p in listed if Path(p).suffix in SUFFIXES and (ROOT / p).is_file()]


def arrows() -> Dict[Tuple[str, str], List[Tuple[str, str]]]:
    """(from layer, to layer) -> the (file, file) pairs behind the arrow."""
    found: Dict[Tuple[str, str], List[Tuple[str, str]]] = defaultdict(list)
    for rel in sources():
        src = layer_of(rel)
        path = ROOT / rel
        targets = _python_targets(path) if path.suffix == ".py" else _cpp_targets(path)
        for target in targets:
            dst = layer_of(target)
            if src and dst and src != dst:
                found[src, dst].append((rel, target))
    return found


def upward(found) -> List[str]:
    order = [name for name, _, _ in LAYERS]
    problems = []
    for (src, dst), pairs in sorted(found.items()):
        if order.index(dst) > order.index(src):
            problems.append(f"{src} -> {dst}: " + ", ".join(f"{a} imports {b}" for a, b in pairs[:3]))
    return problems


def picture(found) -> str:
    order = [name for name, _, _ in LAYERS]
    width = max(len(n) for n in order)
    rows = []
    for name, _, what in reversed(LAYERS):
        uses = sorted({dst for (src, dst) in found if src == name}, key=order.index, reverse=True)
        rows.append((name, ", ".join(f"{u}{'↑' if order.index(u) > order.index(name) else ''}" for u in uses) or "-",
                     what))
    used = max(len(r[1]) for r in rows) + 2
    lines = ["```", f"{'layer':<{width + 2}}{'uses':<{used}}what it is"]
    lines += [f"{name:<{width + 2}}{uses:<{used}}{what}" for name, uses, what in rows]
    lines += ["```", "Each layer uses only layers below it (an arrow up would show as ↑)."]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update ARCHITECTURE.md")
    parser.add_argument("--check", action="store_true", help="fail if an arrow points up")
    args = parser.parse_args(argv)
    found = arrows()
    problems = upward(found)
    if args.check:
        print("\n".join(problems) or "every arrow points down")
        return 1 if problems else 0
    text = picture(found)
    if args.write:
        doc = ROOT / "ARCHITECTURE.md"
        content = doc.read_text()
        block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"  # inside a staff region: it names staff layers
        if MARK_BEGIN in content:
            content = re.sub(re.escape(MARK_BEGIN) + r".*?" + re.escape(MARK_END), lambda _: block, content, flags=re.S)
        else:
            staff = ("<!-- BEGIN " + "STAFF -->", "<!-- END " + "STAFF -->")  # spelled apart: not markers here
            content = (content.rstrip() + f"\n\n{staff[0]}\n## The layers, from the code\n\n" + block +
                       f"\n{staff[1]}\n")
        doc.write_text(content)
    print(text)
    if problems:
        print("\nArrows pointing up:\n" + "\n".join(problems), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
