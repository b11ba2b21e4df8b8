"""Whether an OpenCL device runs NVIDIA tensor cores from OpenCL C: one warp computes a
16×8 product of float16 matrices (k = 16) with inline PTX `mma.sync.aligned.m16n8k16`
(float32 accumulation), and the result is compared with numpy's. NVIDIA's OpenCL compiler
passes `asm` statements through to PTX, so a driver that builds this kernel can run
tensor-core GEMMs written in OpenCL; other drivers refuse it at build time, which this
reports too.

    python -m bench.tensor_cores [--device P:D]     (default: every NVIDIA device)
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import numpy as np
import pyopencl as cl

# The fragment layout of m16n8k16 with row-major A and column-major B (PTX ISA, "Matrix
# fragments for mma.m16n8k16"): lane l holds, for g = l / 4 and t = l % 4, A's elements
# (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..2t+9), (g+8, 2t+8..2t+9) in four 32-bit registers,
# B's (2t..2t+1, g) and (2t+8..2t+9, g) in two, and D's (g, 2t..2t+1), (g+8, 2t..2t+1).
SOURCE = r"""
__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void mma_m16n8k16(__global const ushort *A, __global const ushort *B, __global float *D) {
  const int lane = get_local_id(0), g = lane >> 2, t = lane & 3;
#define AH(r, c) ((uint)A[(r) * 16 + (c)])
#define BH(k, n) ((uint)B[(k) * 8 + (n)])
  const uint a0 = AH(g, 2 * t) | (AH(g, 2 * t + 1) << 16);
  const uint a1 = AH(g + 8, 2 * t) | (AH(g + 8, 2 * t + 1) << 16);
  const uint a2 = AH(g, 2 * t + 8) | (AH(g, 2 * t + 9) << 16);
  const uint a3 = AH(g + 8, 2 * t + 8) | (AH(g + 8, 2 * t + 9) << 16);
  const uint b0 = BH(2 * t, g) | (BH(2 * t + 1, g) << 16);
  const uint b1 = BH(2 * t + 8, g) | (BH(2 * t + 9, g) << 16);
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  D[g * 8 + 2 * t] = d0;
  D[g * 8 + 2 * t + 1] = d1;
  D[(g + 8) * 8 + 2 * t] = d2;
  D[(g + 8) * 8 + 2 * t + 1] = d3;
}
"""


def probe(device: cl.Device) -> str:
    """One line: the product's largest error against numpy, or why the device refused it."""
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    try:
        program = cl.Program(ctx, SOURCE).build()
    except cl.Error as err:
        first = next((line for line in str(err).splitlines() if "error" in line.lower()), str(err).splitlines()[0])
        return f"refused: the kernel does not build ({first.strip()[:160]})"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    flags = cl.mem_flags
    a_buf = cl.Buffer(ctx, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=a.view(np.uint16))
    b_buf = cl.Buffer(ctx, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=b.view(np.uint16))
    d = np.zeros((16, 8), np.float32)
    d_buf = cl.Buffer(ctx, flags.WRITE_ONLY, d.nbytes)
    program.mma_m16n8k16(queue, (32,), (32,), a_buf, b_buf, d_buf)
    cl.enqueue_copy(queue, d, d_buf)
    queue.finish()
    ref = a.astype(np.float32) @ b.astype(np.float32)
    error = float(np.abs(d - ref).max())
    verdict = "runs" if error <= 1e-3 * float(np.abs(ref).max()) else "WRONG RESULT"
    return f"{verdict}: mma.sync m16n8k16 float16 -> float32, max abs error {error:.1e}"


def devices(selected: Optional[str]) -> List[cl.Device]:
    platforms = cl.get_platforms()
    if selected:
        p, d = (int(x) for x in selected.split(":"))
        return [platforms[p].get_devices()[d]]
    return [d for p in platforms if "NVIDIA" in p.name for d in p.get_devices()]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", metavar="P:D", help="platform:device index (default: every NVIDIA device)")
    args = parser.parse_args(argv)
    found = devices(args.device)
    if not found:
        print("no NVIDIA OpenCL device here (pass --device P:D to try another device)")
        return 0
    for device in found:
        print(f"{device.name} ({device.platform.name}, driver {device.driver_version}): {probe(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
