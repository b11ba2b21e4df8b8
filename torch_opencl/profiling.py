"""Where the device's time goes, kernel by kernel: `kernel_profile()` gives every kernel
launched inside it (and every CLBlast call) an OpenCL profiling event, and reports their
device times by operator and kernel. Re-exported by torch_opencl (and torch.opencl).

    with torch_opencl.kernel_profile() as prof:
        loss = F.cross_entropy(model(x), t); loss.backward()
    print(prof)                          # by operator and kernel, the longest first
    print(prof.table(by="kernel"))       # by kernel only
    prof.launches                        # one KernelLaunch per command, in launch order

torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) shows
the same commands as device activities linked to torch's operators (csrc/runtime/profiler.cpp);
one of the two runs at a time.

The times are the device's own (start to end of each command), so they do not include the
host's work between launches: compare their sum (`prof.seconds`) with the wall time of the
same code to see how much of it the host costs. Replays of a recorded graph are not timed
(time the plain step), and the block waits for the device when it ends.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, NamedTuple, Tuple

import torch

from .devices import device_index

__all__ = ["KernelLaunch", "KernelProfile", "kernel_profile"]

_ops = torch.ops.oclf


class KernelLaunch(NamedTuple):
    """One timed command: its kernel ("clblast" for a CLBlast call), the outermost device
    operator that enqueued it ("aten::convolution_backward_overrideable", ...), its global
    size ("3136x16x1") and its device time in seconds."""
    kernel: str
    op: str
    global_size: str
    seconds: float


class KernelProfile:
    """The commands timed by one kernel_profile() block, filled in when it ends."""

    def __init__(self):
        self.launches: List[KernelLaunch] = []

    @property
    def seconds(self) -> float:
        """The device time of every command, summed."""
        return sum(launch.seconds for launch in self.launches)

    def totals(self, by: str = "op+kernel") -> Dict[Tuple[str, ...], Tuple[int, float]]:
        """(calls, seconds) per group: by "op", "kernel" or "op+kernel"."""
        if by not in ("op", "kernel", "op+kernel"):
            raise ValueError(f"kernel_profile: by must be 'op', 'kernel' or 'op+kernel', got {by!r}")
        out: Dict[Tuple[str, ...], List] = defaultdict(lambda: [0, 0.0])
        for launch in self.launches:
            key = {"op": (launch.op,), "kernel": (launch.kernel,), "op+kernel": (launch.op, launch.kernel)}[by]
            out[key][0] += 1
            out[key][1] += launch.seconds
        return {key: (calls, seconds) for key, (calls, seconds) in out.items()}

    def table(self, by: str = "op+kernel", rows: int = 30) -> str:
        """The `rows` groups with the most device time, as a table."""
        totals = self.totals(by)
        if not totals:
            return "opencl kernel profile: no kernel ran"
        whole = self.seconds
        names = {key: " / ".join(key) for key in totals}
        ordered = sorted(totals, key=lambda key: (-totals[key][1], names[key]))[:rows]
        width = max(len(by), *(len(names[key]) for key in ordered))
        lines = [f"opencl kernel profile: {len(self.launches)} command(s), {whole * 1e3:.3f} ms of device time",
                 f"{by:<{width}}  {'calls':>7}  {'total ms':>10}  {'mean us':>9}  {'% time':>6}"]
        for key in ordered:
            calls, seconds = totals[key]
            share = 100 * seconds / whole if whole > 0 else 0.0
            lines.append(f"{names[key]:<{width}}  {calls:>7}  {seconds * 1e3:>10.3f}  {seconds * 1e6 / calls:>9.1f}  "
                         f"{share:>6.1f}")
        if len(totals) > rows:
            lines.append(f"... {len(totals) - rows} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"KernelProfile({len(self.launches)} commands, {self.seconds * 1e3:.3f} ms)"


class kernel_profile:
    """`with kernel_profile() as prof: ...` times every kernel a device (the current one, or
    `device`) launches inside the block (see the module's text). One profile runs at a time
    per device; it cannot wrap a graph's recording (recording may not wait for the device)."""

    def __init__(self, device=None) -> None:
        self._device = device_index(device, optional=False)

    def __enter__(self) -> KernelProfile:
        self._profile = KernelProfile()
        _ops.kernel_timing_start(self._device)
        return self._profile

    def __exit__(self, *exc) -> bool:
        kernels, ops, sizes, ns = _ops.kernel_timing_stop(self._device)
        self._profile.launches = [KernelLaunch(k, o, g, t * 1e-9) for k, o, g, t in zip(kernels, ops, sizes, ns)]
        return False
