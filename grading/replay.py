"""Runs recorded launches again under Oclgrind: the race check's driver, written by the
grader, so the student's host code never runs where Oclgrind watches (it could tell, and
launch something else there).

    oclgrind --data-races ... python -m grading.replay IN_FD OUT_FD

The launch log (opencl_functions/runtime/launch_log.hpp) recorded, for every kernel the
host code launched in a captured call, its program (file, source hash, build options),
NDRange, argument values and the contents of each buffer argument before and after the
launch on the grading device. Per launch this driver builds the same program from the same
file, makes buffers holding the "before" contents, sets the same arguments, launches the
same NDRange, and compares what it wrote with the device's "after" contents: a kernel that
behaves differently under Oclgrind shows as a mismatch. Oclgrind writes what it finds
(races, out-of-bounds and invalid accesses) to its log, which the grader reads; with
`--quick` it runs only the first and last work-group of each launch (how the timed layers
are checked: every work-group of a large layer would take Oclgrind minutes).

Messages in (grading.channel): {"launch": record, "label": text, "quick": bool}; out, one
per launch: {"label": text, "problems": [text, ...]}.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from grading import channel, kernel_rules

STUDENT_KERNEL = "conv2d.cl"


def fnv1a(data: bytes) -> str:
    """The runtime's source hash (Tuning::hash)."""
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def compare(before: bytes, replayed: bytes, device: bytes, quick: bool) -> Optional[str]:
    """None when the replay wrote what the device wrote (where it wrote anything, if quick),
    else the first difference. Buffers are compared as float32 when their size allows, with
    a tolerance for two compilers' rounding; bit for bit otherwise."""
    if len(replayed) != len(device):
        return f"{len(replayed)} bytes against the device's {len(device)}"
    if len(device) % 4:
        return None if replayed == device else "differs from the device's output"
    got = np.frombuffer(replayed, dtype=np.float32)
    want = np.frombuffer(device, dtype=np.float32)
    same = got.view(np.uint32) == want.view(np.uint32)
    if quick:
        same |= got.view(np.uint32) == np.frombuffer(before, dtype=np.uint32)  # not written by the groups run
    finite = np.isfinite(want)
    scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= 1e-4 * scale + 1e-3 * np.abs(want)
    bad = np.flatnonzero(~(same | close | (np.isnan(got) & np.isnan(want))))
    if not len(bad):
        return None
    i = int(bad[0])
    return f"element {i}: {float(got[i])!r} under Oclgrind, {float(want[i])!r} on the device ({len(bad)} differ)"


class Driver:
    """One OpenCL context on Oclgrind, with the programs it has built."""

    def __init__(self, tree: Path) -> None:
        import pyopencl as cl

        self.cl, self.tree = cl, tree.resolve()
        self.context = cl.Context(devices=[cl.get_platforms()[0].get_devices()[0]])
        self.queue = cl.CommandQueue(self.context)
        self.programs: Dict[Tuple[str, str], object] = {}

    def source(self, launch: Dict) -> Tuple[Optional[str], List[str]]:
        """The text of the launch's kernel file, with what the rules refuse in it."""
        path = Path(launch["path"]).resolve()
        if self.tree not in path.parents or not path.is_file():
            return None, [f"kernel {launch['kernel'] or '?'} was built from {launch['path'] or 'a source'} outside "
                          f"the submission: kernels must come from its .cl files, through rt.kernel"]
        data = path.read_bytes()
        if fnv1a(data) != launch["source_hash"]:
            return None, [f"{path.name} changed after kernel {launch['kernel']} was built from it"]
        text = data.decode(errors="replace")
        problems = kernel_rules.option_problems(launch["options"])
        if path.name == STUDENT_KERNEL:
            problems += kernel_rules.source_problems(text, path.name)
        return text, problems

    def program(self, path: str, text: str, options: str):
        """The program as the runtime builds it (Programs::kernel): a source with #include
        lines (the reference's kernels; the student's may have none) finds its headers beside it."""
        key = (path, options)
        if key not in self.programs:
            include = ["-I" + str(Path(path).resolve().parent)] if "#include" in text else []
            self.programs[key] = self.cl.Program(self.context, text).build(
                options=["-cl-std=CL1.2", *include, *shlex.split(options)])
        return self.programs[key]

    def replay(self, launch: Dict, quick: bool) -> List[str]:
        cl = self.cl
        text, problems = self.source(launch)
        if problems:
            return problems
        try:
            kernel = cl.Kernel(self.program(launch["path"], text, launch["options"]), launch["kernel"])
        except cl.Error as err:
            return [f"kernel {launch['kernel']} does not build under Oclgrind: {str(err)[:3000]}"]
        before = [channel.as_bytes(b["before"]) for b in launch["buffers"]]
        buffers = [cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)
                   if recorded["bytes"] else None for data, recorded in zip(before, launch["buffers"])]
        for i, arg in enumerate(launch["args"]):
            if arg["kind"] == "buffer":
                kernel.set_arg(i, buffers[arg["buffer"]] if arg["buffer"] >= 0 else None)
            elif arg["kind"] == "local":
                kernel.set_arg(i, cl.LocalMemory(max(arg["size"], 1)))
            elif arg["kind"] == "value":
                kernel.set_arg(i, np.frombuffer(channel.as_bytes(arg["value"]), dtype=np.uint8))
            else:
                return [f"kernel {launch['kernel']}: argument {i} was not set through set_args"]
        cl.enqueue_nd_range_kernel(self.queue, kernel, tuple(launch["global"]), tuple(launch["local"]) or None)
        self.queue.finish()
        for i, (recorded, buffer) in enumerate(zip(launch["buffers"], buffers)):
            if buffer is None:
                continue
            replayed = np.empty(recorded["bytes"], dtype=np.uint8)
            cl.enqueue_copy(self.queue, replayed, buffer)
            difference = compare(before[i], replayed.tobytes(), channel.as_bytes(recorded["after"]), quick)
            if difference:
                argument = next(j for j, a in enumerate(launch["args"]) if a["kind"] == "buffer" and a["buffer"] == i)
                problems.append(f"kernel {launch['kernel']}, argument {argument}: {difference}")
        return problems


def main() -> None:
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    driver = Driver(Path(os.getcwd()))
    while (message := channel.receive(fd_in)) is not None and "launch" in message:
        try:
            problems = driver.replay(message["launch"], bool(message.get("quick")))
        except Exception as err:  # a launch Oclgrind refuses: the grader reports it, and the log says why
            problems = [f"kernel {message['launch'].get('kernel')}: {type(err).__name__}: {str(err)[:2000]}"]
        channel.send(fd_out, {"label": message.get("label", ""), "problems": problems})


if __name__ == "__main__":
    main()
