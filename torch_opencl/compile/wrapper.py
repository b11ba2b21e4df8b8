"""What Inductor registers for the opencl device: the scheduling that renders each fusion
group as one OpenCL kernel (kernel.py), the host wrapper it writes around the kernels,
and the few host-side lines of the device (its guard, no raw stream).

The wrapper is Inductor's Python wrapper (allocations planned for the whole graph,
extern kernels, buffer reuse) with three changes: each generated kernel is defined as
`oclf_runtime.GeneratedKernel(name, source)` (its source written to the cache folder and
built once through the device's program cache), a kernel call is `kernel.run(tensors,
scalars, global_size, local_size)`, and the module's `call` is wrapped by
`oclf_runtime.Replayed`, which records the graph's launches once and replays them
(replay.py), told whether the graph's 0-dim CPU inputs may become device tensors there.
"""
from __future__ import annotations

from typing import Any

from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.simd import SIMDScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.utils import get_kernel_metadata
from torch._inductor.virtualized import V

from .kernel import KERNEL_NAME, OpenCLKernel

RUNTIME = "torch_opencl.compile.runtime"


class OpenCLScheduling(SIMDScheduling):
    kernel_type = OpenCLKernel  # type: ignore[assignment]

    @classmethod
    def get_tiling_and_scores(cls, node_schedule, numel, reduction_numel=1, coalesce_analysis=None):
        # One range over the outputs and one over the reduced elements: no 2-D tiles.
        return {"x": numel, "r0_": reduction_numel}, None

    def define_kernel(self, src_code: str, node_schedule: Any, kernel: OpenCLKernel) -> str:
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        name = f"opencl_kernel_{wrapper.next_kernel_suffix()}"
        wrapper.src_to_kernel[src_code] = name
        source = src_code.replace(KERNEL_NAME, name)
        origins, _ = get_kernel_metadata(node_schedule, wrapper)
        if origins:
            wrapper.header.writeline(f"# {origins.lstrip('# ')}")
        wrapper.header.writeline(f"{name} = oclf_runtime.GeneratedKernel({name!r}, r'''")
        for line in source.splitlines():
            wrapper.header.writeline(line)
        wrapper.header.writeline("''')")
        return name


class OpenCLWrapperCodegen(PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: PythonWrapperCodegen | None,
               partition_signatures: Any = None):
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return OpenCLWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(f"from {RUNTIME.rsplit('.', 1)[0]} import runtime as oclf_runtime")

    def _generate_extern_kernel_out_helper(self, kernel: str, out: str, out_view: str | None, args: list,
                                           *rest: Any, **kwargs: Any) -> None:
        if kernel == "aten.randint.low_out":  # Inductor's RandomSeeds: refilled on each replay
            self.writeline(f"oclf_runtime.seeds({out_view or out}, {', '.join(args)})")
            return
        super()._generate_extern_kernel_out_helper(kernel, out, out_view, args, *rest, **kwargs)

    def generate_after_suffix(self, result: Any) -> None:
        super().generate_after_suffix(result)
        mutated = sorted(set(getattr(V.graph, "mutated_input_idxs", ()) or ()))
        # Whether 0-dim CPU inputs (a static cache's lengths, made on the CPU) may be handed
        # to the recording as device tensors: only where nothing of the graph runs on the CPU
        # (a CPU kernel given a device tensor would read device memory as host memory).
        on_cpu = [buf for buf in V.graph.buffers
                  if (device := buf.get_device()) is not None and device.type == "cpu"]
        result.writeline(f"call = oclf_runtime.Replayed(call, mutated_inputs={mutated!r}, "
                         f"cpu_scalars={not on_cpu!r})")


class OpenCLDeviceOpOverrides(DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(index): return 0"

    def set_device(self, device_idx: Any) -> str:
        return f"torch.opencl.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.opencl.synchronize()"

    def device_guard(self, device_idx: Any) -> str:
        return f"torch.opencl.device({device_idx})"
