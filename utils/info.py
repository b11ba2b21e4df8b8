"""`make info`: the OpenCL platforms and devices, and which one OCLF_DEVICE (or its alias
OCL_DEVICE) selects."""
import sys

import opencl_functions as ocl
from utils import config


def main() -> int:
    try:
        devices = ocl.list_devices()
    except ocl.OpenCLError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    try:
        selected = ocl.device_info()
    except ocl.OpenCLError as err:
        selected = None
        problem = str(err)
    print(f"{config.variable('DEVICE')}={config.get('DEVICE')!r}  kernels from {ocl._core.kernel_dir()}")
    for d in devices:
        mark = "*" if selected and d["index"] == selected["index"] else " "
        print(f" {mark} {d['index']}  {d['type']:<4} {d['platform']} / {d['device']}")
    if selected is None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f"selected: {selected['device']} ({selected['version']}; max work-group {selected['max_work_group_size']}, "
          f"local memory {selected['local_mem_size'] // 1024} KiB, {selected['compute_units']} compute units)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
