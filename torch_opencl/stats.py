"""What the opencl device reports about itself: the CPU fallback's record (calls, wall time,
bytes moved per operator) as a dict, a table and a scope, and the caching allocator's
counters as a dict and a summary. Re-exported by torch_opencl (and torch.opencl).
"""
from __future__ import annotations

from typing import Dict, NamedTuple

import torch

from .devices import device_index, get_device_name

__all__ = [
    "FallbackStat", "FallbackReport", "fallback_ops", "reset_fallback_ops", "fallback_stats", "fallback_report",
    "fallback_scope", "memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_summary",
    "empty_cache",
]

_ops = torch.ops.oclf


class FallbackStat(NamedTuple):
    """One operator's CPU fallback calls, summed. `seconds` is wall time of the whole fallback
    (copies to the host, the CPU kernel, copies back), its clock started once the kernels
    queued before it have finished; copies back are queued, so their device side may end
    later. The bytes count the device tensors among its arguments (to the host) and among
    its results (back to the device)."""
    calls: int
    seconds: float
    bytes_to_host: int
    bytes_to_device: int

    def __sub__(self, other: "FallbackStat") -> "FallbackStat":
        return FallbackStat(self.calls - other.calls, self.seconds - other.seconds,
                            self.bytes_to_host - other.bytes_to_host, self.bytes_to_device - other.bytes_to_device)


def _record(whole: bool) -> Dict[str, FallbackStat]:
    names, numbers = _ops.fallback_record(whole)
    out = {}
    for i, name in enumerate(names):
        calls, ns, to_host, to_device = numbers[4 * i:4 * i + 4]
        out[name] = FallbackStat(int(calls), ns / 1e9, int(to_host), int(to_device))
    return out


def fallback_ops() -> Dict[str, int]:
    """Operators that ran through the CPU fallback since the last reset, with call counts."""
    return {name: stat.calls for name, stat in _record(whole=False).items()}


def reset_fallback_ops() -> None:
    """Forgets the fallback record (each operator warns once again). Open fallback_scope()s
    are not disturbed."""
    _ops.reset_fallback_ops()


def fallback_stats() -> Dict[str, FallbackStat]:
    """The CPU fallback's record since the last reset_fallback_ops(), by operator name."""
    return _record(whole=False)


def _bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


def _fallback_table(ops: Dict[str, FallbackStat], title: str) -> str:
    if not ops:
        return f"{title}: no operator ran on the CPU"
    rows = sorted(ops.items(), key=lambda item: (-item[1].seconds, item[0]))
    calls = sum(s.calls for s in ops.values())
    seconds = sum(s.seconds for s in ops.values())
    width = max(len("operator"), *(len(name) for name in ops))
    lines = [f"{title}: {len(ops)} operator(s), {calls} call(s), {seconds * 1e3:.3f} ms",
             f"{'operator':<{width}}  {'calls':>7}  {'total ms':>10}  {'mean ms':>9}  {'% time':>6}  "
             f"{'to host':>10}  {'to device':>10}"]
    for name, s in rows:
        share = 100 * s.seconds / seconds if seconds > 0 else 0.0
        lines.append(f"{name:<{width}}  {s.calls:>7}  {s.seconds * 1e3:>10.3f}  {s.seconds * 1e3 / s.calls:>9.3f}  "
                     f"{share:>6.1f}  {_bytes(s.bytes_to_host):>10}  {_bytes(s.bytes_to_device):>10}")
    return "\n".join(lines)


def fallback_report() -> str:
    """fallback_stats() as a table, the operators that took longest first."""
    return _fallback_table(fallback_stats(), "opencl CPU fallback since the last reset")


class FallbackReport:
    """What fell back to the CPU inside one fallback_scope(): `ops` (name -> FallbackStat),
    `calls`, `seconds`; str() is the table. Filled in when the scope exits, and live
    (everything so far) while it is open."""

    def __init__(self):
        self._start = _record(whole=True)
        self._ops: Dict[str, FallbackStat] | None = None

    def _since_start(self) -> Dict[str, FallbackStat]:
        out = {}
        for name, stat in _record(whole=True).items():
            diff = stat - self._start[name] if name in self._start else stat
            if diff.calls > 0:
                out[name] = diff
        return out

    def _close(self) -> None:
        self._ops = self._since_start()

    @property
    def ops(self) -> Dict[str, FallbackStat]:
        return self._ops if self._ops is not None else self._since_start()

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.ops.values())

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.ops.values())

    def __str__(self) -> str:
        return _fallback_table(self.ops, "opencl CPU fallback in this scope")

    def __repr__(self) -> str:
        return f"FallbackReport({len(self.ops)} operators, {self.calls} calls, {self.seconds * 1e3:.3f} ms)"


class fallback_scope:
    """`with fallback_scope() as report: ...` records what falls back to the CPU inside the
    block: `report.ops`, `print(report)`. Scopes nest (an outer one includes its inner ones)
    and neither resets nor disturbs fallback_ops()/fallback_stats()."""

    def __enter__(self) -> FallbackReport:
        self._report = FallbackReport()
        return self._report

    def __exit__(self, *exc) -> bool:
        self._report._close()
        return False


_MEMORY_KEYS = ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "buffers_created", "allocations",
                "cache_hits", "kernel_launches", "programs_built", "peak_reserved_bytes", "live_buffers",
                "cached_buffers", "frees", "buffers_released", "bytes_to_host")


def memory_stats(device=None) -> Dict[str, int]:
    """One device's caching allocator's counters (the current device by default). Bytes:
    allocated (live storages, rounded to their bucket), reserved (allocated plus cached free
    buffers) and their peaks (since the start or reset_peak_memory_stats()); buffers: live and
    cached now; accumulated since the start or reset_accumulated_memory_stats(): buffers
    created, allocations, allocations served from the cache, frees, buffers released; and the
    device's kernel launches, the kernels it took from the program cache, and the bytes read
    back to the host since the start."""
    return dict(zip(_MEMORY_KEYS, (int(v) for v in _ops.memory_stats(device_index(device)))))


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["peak_allocated_bytes"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["peak_reserved_bytes"]


def reset_peak_memory_stats(device=None) -> None:
    """The peaks of allocated and reserved bytes start again from their current values."""
    _ops.reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    """Buffers created, allocations, cache hits, frees and buffers released start again from 0."""
    _ops.reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Gives the cached (free) buffers of every device back to OpenCL."""
    _ops.empty_cache()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """The allocator's state as a table, as torch.cuda.memory_summary() prints it."""
    s = memory_stats(device)
    cached = s["reserved_bytes"] - s["allocated_bytes"]
    hits = 100 * s["cache_hits"] / s["allocations"] if s["allocations"] else 0.0
    rule = "-" * 60
    lines = [rule, f"opencl memory summary: {get_device_name(device)}", rule,
             f"{'':<24}{'current':>18}{'peak':>18}",
             f"{'allocated':<24}{_bytes(s['allocated_bytes']):>18}{_bytes(s['peak_allocated_bytes']):>18}",
             f"{'reserved':<24}{_bytes(s['reserved_bytes']):>18}{_bytes(s['peak_reserved_bytes']):>18}",
             f"{'cached (free)':<24}{_bytes(cached):>18}",
             f"{'live buffers':<24}{s['live_buffers']:>18}",
             f"{'cached buffers':<24}{s['cached_buffers']:>18}"]
    if not abbreviated:
        lines += [rule, "since the start or reset_accumulated_memory_stats():",
                  f"{'allocations':<24}{s['allocations']:>18}",
                  f"{'  from the cache':<24}{s['cache_hits']:>18}  ({hits:.1f} %)",
                  f"{'frees':<24}{s['frees']:>18}",
                  f"{'buffers created':<24}{s['buffers_created']:>18}",
                  f"{'buffers released':<24}{s['buffers_released']:>18}",
                  rule,
                  f"{'kernel launches':<24}{s['kernel_launches']:>18}",
                  f"{'programs built':<24}{s['programs_built']:>18}"]
    lines.append(rule)
    return "\n".join(lines)
