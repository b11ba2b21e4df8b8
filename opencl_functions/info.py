"""`make info` (python -m opencl_functions.info): the OpenCL platforms and devices, and which
one OCLF_DEVICE (or its alias OCL_DEVICE) selects; host_cpu(), the machine that goes with
every measured figure."""
import os
import platform
import sys

from . import OpenCLError, _core, device_info, list_devices, settings


def host_cpu() -> str:
    """The host CPU's model, family/model numbers and widest vector extension (from
    /proc/cpuinfo on Linux): CPU speed figures depend on it, so it goes with every figure."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return platform.processor() or platform.machine()
    flags = fields.get("flags", "").split()
    vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else \
        "SSE" if "sse2" in flags else "no x86 vectors"
    return (f"{fields.get('model name', platform.machine())}, family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')}, {vectors}, {os.cpu_count()} CPUs")


def main() -> int:
    try:
        devices = list_devices()
    except OpenCLError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    try:
        selected = device_info()
    except OpenCLError as err:
        selected = None
        problem = str(err)
    print(f"{settings.variable('DEVICE')}={settings.get('DEVICE')!r}  kernels from {_core.kernel_dir()}")
    for d in devices:
        mark = "*" if selected and d["index"] == selected["index"] else " "
        print(f" {mark} {d['index']}  {d['type']:<4} {d['platform']} / {d['device']}")
    if selected is None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f"selected: {selected['device']} ({selected['version']}; max work-group {selected['max_work_group_size']}, "
          f"local memory {selected['local_mem_size'] // 1024} KiB, {selected['compute_units']} compute units)")
    print(f"host CPU: {host_cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
