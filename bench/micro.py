"""Micro-benchmark: single matrix products and attention prefill on the opencl device against
torch's own (cuBLAS and torch's attention backends on a CUDA machine, torch on the CPU
elsewhere), as time, TFLOP/s and a share of the device's peak (bench.peaks).

    python -m bench.micro [--json FILE] [--quick] [--only gemm|attention] [--dtype D ...] [--shape TEXT ...]

GEMM: F.linear(x, W), x (M, K) and W (N, K), as a transformer's layers call it, in float32,
float16 and bfloat16: 4096³, one token through a 4096×4096 layer, 16 tokens through an
11008-wide MLP's two products, and a 2048-token prefill through the first. On CUDA, float32
runs with TF32 off (the same arithmetic as ours); the `torch_tf32` column is cuBLAS with TF32
on, held against the TF32 peak. Attention: F.scaled_dot_product_attention, float16 and
bfloat16, (batch, heads, sequence, head dim) = (4, 16, 1024, 64) causal and not, and one
4096-token causal sequence; on CUDA torch's default dispatch and each of its flash, cuDNN and
memory-efficient backends alone (a backend that refuses the case reads n/a). A causal
attention counts half the FLOPs of a full one.

Both sides are timed as bench.layers times a layer: 20 calls recorded in one graph (the
opencl device's graph(), a CUDA graph) and replayed, the time per call between two events on
the device's clock (torch on the CPU: wall time of one call); the sides alternate round after
round and the fastest round counts (--stat median: the median). Our first call of each case
is untimed (it builds kernels and may tune the shape: opencl_functions.tuning.warm_up). Each
result is checked against float32 torch on the same 16-bit inputs (TF32 off; attention on
torch's math backend): max |out - ref| / max |ref|.
"""
from __future__ import annotations

import argparse
import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from bench import peaks, record
from bench.layers import Timer, TorchRunner, replayed_timer
from opencl_functions import tuning


@dataclass(frozen=True)
class Gemm:
    m: int
    k: int
    n: int
    what: str

    @property
    def name(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"

    def flops(self) -> int:
        return peaks.gemm_flops(self.m, self.k, self.n)

    def bytes(self, dtype: torch.dtype) -> int:
        """What the product reads and writes at least: x, W and the output once each."""
        return (self.m * self.k + self.n * self.k + self.m * self.n) * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Attention:
    batch: int
    heads: int
    seq: int
    dim: int
    causal: bool

    @property
    def name(self) -> str:
        return f"b{self.batch} h{self.heads} s{self.seq} d{self.dim}" + (" causal" if self.causal else "")

    def flops(self) -> int:
        return peaks.attention_flops(self.batch, self.heads, self.seq, self.seq, self.dim, self.causal)


GEMMS = [Gemm(4096, 4096, 4096, "square"), Gemm(1, 4096, 4096, "one token, 4096-wide layer"),
         Gemm(16, 4096, 11008, "16 tokens, MLP up"), Gemm(16, 11008, 4096, "16 tokens, MLP down"),
         Gemm(2048, 4096, 11008, "2048-token prefill, MLP up")]
ATTENTIONS = [Attention(4, 16, 1024, 64, True), Attention(4, 16, 1024, 64, False), Attention(1, 16, 4096, 64, True)]
QUICK_GEMMS = [Gemm(33, 96, 80, "odd sizes"), Gemm(1, 256, 320, "one row"), Gemm(16, 128, 352, "16 rows")]
QUICK_ATTENTIONS = [Attention(1, 2, 40, 32, True)]
GEMM_DTYPES = ["float32", "float16", "bfloat16"]
ATTENTION_DTYPES = ["float16", "bfloat16"]
# torch's attention backends timed alone on CUDA: column -> SDPBackend's name.
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().float().cpu(), ref.detach().float().cpu()
    return float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def _with_tf32(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """fn with cuBLAS allowed TF32 while it runs (read at each call, so also while captured)."""
    def run() -> torch.Tensor:
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return fn()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
    return run


def _with_backend(backend: str, fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """fn with torch's attention restricted to one backend (SDPBackend's name)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run() -> torch.Tensor:
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return fn()
    return run


def _math_attention() -> contextlib.AbstractContextManager:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def _peer_timers(runner: TorchRunner, fns: Dict[str, Callable[[], torch.Tensor]], ref: torch.Tensor,
                 errors: Dict[str, float], refused: Dict[str, str]) -> Dict[str, Callable[[], float]]:
    """A timer per torch variant that runs here, each variant's error against ref; a variant
    that raises (an attention backend that does not take the case) goes to `refused`."""
    timers = {}
    for column, fn in fns.items():
        try:
            errors[column] = _rel_error(fn(), ref)
            timers[column] = runner.timer(fn)
        except RuntimeError as err:
            refused[column] = str(err).strip().splitlines()[0][:200]
    return timers


def bench_gemm(s: Gemm, dtype: str, runner: TorchRunner, timer: Timer) -> Dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(s.m, s.k, generator=gen).to(getattr(torch, dtype))
    w = (torch.randn(s.n, s.k, generator=gen) / math.sqrt(s.k)).to(getattr(torch, dtype))
    xt, wt = runner.to(x, w)
    ref = F.linear(xt.float(), wt.float())
    xo, wo = x.to("opencl"), w.to("opencl")
    ours = lambda: F.linear(xo, wo)  # noqa: E731
    out, _ = tuning.warm_up(ours, "the micro-benchmark's products")
    errors, refused = {"ours": _rel_error(out, ref)}, {}
    variants = {"torch": lambda: F.linear(xt, wt)}
    if runner.device.type == "cuda" and dtype == "float32":
        variants["torch_tf32"] = _with_tf32(variants["torch"])
    timers = {"ours": replayed_timer(ours), **_peer_timers(runner, variants, ref, errors, refused)}
    return {"kind": "gemm", "name": s.name, "what": s.what, "dtype": dtype, "shape": vars(s), "flops": s.flops(),
            "bytes": s.bytes(x.dtype), "times_ns": timer.all(timers), "max_rel_error": errors, "refused": refused}


def bench_attention(s: Attention, dtype: str, runner: TorchRunner, timer: Timer) -> Dict:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s.batch, s.heads, s.seq, s.dim, generator=gen).to(getattr(torch, dtype)) for _ in range(3))
    qt, kt, vt = runner.to(q, k, v)
    with _math_attention():
        ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), is_causal=s.causal)
    qo, ko, vo = q.to("opencl"), k.to("opencl"), v.to("opencl")
    ours = lambda: F.scaled_dot_product_attention(qo, ko, vo, is_causal=s.causal)  # noqa: E731
    out, _ = tuning.warm_up(ours, "the micro-benchmark's attention")
    errors, refused = {"ours": _rel_error(out, ref)}, {}
    variants = {"torch": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=s.causal)}
    if runner.device.type == "cuda":
        variants.update({column: _with_backend(backend, variants["torch"])
                         for column, backend in SDPA_BACKENDS.items()})
    timers = {"ours": replayed_timer(ours), **_peer_timers(runner, variants, ref, errors, refused)}
    return {"kind": "attention", "name": s.name, "what": "prefill", "dtype": dtype, "shape": vars(s),
            "flops": s.flops(), "times_ns": timer.all(timers), "max_rel_error": errors, "refused": refused}


def peer(row: Dict) -> Optional[str]:
    """The fastest of torch's columns at the row's own precision (TF32 is another precision)."""
    columns = [c for c, t in row["times_ns"].items() if c not in ("ours", "torch_tf32") and t]
    return min(columns, key=lambda c: row["times_ns"][c]) if columns else None


def print_table(rows: List[Dict], device_peaks: Optional[peaks.Peaks]) -> None:
    print(f"\npeaks: {device_peaks or 'n/a (unknown device; OCLF_PEAKS sets them)'}")
    print(f"{'case':<24}{'dtype':<10}{'ours us':>10}{'TFLOP/s':>9}{'peak':>9}{'peer':>11}{'us':>10}{'TFLOP/s':>9}"
          f"{'peak':>9}{'speed':>8}{'err ours':>10}{'err peer':>10}")

    def cells(row: Dict, ns: Optional[float]) -> str:
        if not ns:
            return f"{'-':>10}{'-':>9}{'-':>9}"
        share = peaks.fraction(row["flops"], ns * 1e-9, device_peaks, row["dtype"])
        return f"{ns / 1e3:>10.1f}{row['flops'] / ns / 1e3:>9.2f}{peaks.percent(share):>9}"

    for r in rows:
        best = peer(r)
        ours, theirs = r["times_ns"]["ours"], r["times_ns"].get(best) if best else None
        speed = f"{theirs / ours:.2f}x" if theirs else "-"
        err_peer = f"{r['max_rel_error'][best]:.1e}" if best else "-"
        print(f"{r['name']:<24}{r['dtype']:<10}{cells(r, ours)}{best or '-':>11}{cells(r, theirs)}{speed:>8}"
              f"{r['max_rel_error']['ours']:>10.1e}{err_peer:>10}")


def main(argv: Optional[List[str]] = None) -> List[Dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="record the rows into this file (merged with its other rows)")
    parser.add_argument("--quick", action="store_true", help="small odd shapes, few rounds (for tests)")
    parser.add_argument("--only", choices=["gemm", "attention"], action="append", help="only these kinds")
    parser.add_argument("--dtype", action="append", choices=GEMM_DTYPES, help="only these dtypes (repeatable)")
    parser.add_argument("--shape", action="append", help="only the cases whose name holds this text (repeatable)")
    parser.add_argument("--stat", choices=["min", "median"], default="min", help="which round counts")
    parser.add_argument("--torch-device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where torch runs (auto: CUDA when available)")
    args = parser.parse_args(argv)
    import torch_opencl  # noqa: F401  (registers the opencl device)

    torch_device = args.torch_device if args.torch_device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    runner = TorchRunner(torch_device)
    timer = Timer(1, 2, 3, 0.0, args.stat) if args.quick else Timer(1, 5, 20, 0.5, args.stat)
    kinds = args.only or ["gemm", "attention"]
    work = []
    if "gemm" in kinds:
        work += [(bench_gemm, s, d) for s in (QUICK_GEMMS if args.quick else GEMMS) for d in GEMM_DTYPES]
    if "attention" in kinds:
        work += [(bench_attention, s, d) for s in (QUICK_ATTENTIONS if args.quick else ATTENTIONS)
                 for d in ATTENTION_DTYPES]
    work = [(fn, s, d) for fn, s, d in work if (not args.dtype or d in args.dtype)
            and (not args.shape or any(text in s.name for text in args.shape))]
    if not work:
        parser.error("no case left after --only, --dtype and --shape")
    where = record.machine()
    device_peaks = peaks.lookup(where["device"])
    print(f"OpenCL: {where['device']} ({where['platform']}) vs {runner.describe()}; host CPU: {where['host_cpu']}")
    rows = []
    for fn, s, dtype in work:
        row = fn(s, dtype, runner, timer)
        row.update(machine=where, torch_side=runner.describe(), quick=args.quick, stat=args.stat)
        rows.append(row)
        if args.json:
            record.save(args.json, "micro", f"{row['kind']}:{row['name']}:{dtype}", row)
        print(f"{row['kind']} {row['name']} {dtype}: " + ", ".join(
            f"{c} {t / 1e3:.1f} us" for c, t in row["times_ns"].items()), flush=True)
    print_table(rows, device_peaks)
    return rows


if __name__ == "__main__":
    main()
