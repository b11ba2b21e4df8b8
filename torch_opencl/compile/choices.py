"""Inductor's fusion heuristics, for the opencl device's kernels (an InductorChoices that
register() installs as config.inductor_choices_class where none is set; nodes of other
devices get Inductor's own answers).

Inductor fuses two independent groups over the same range (horizontal fusion) only when
they share at least config.score_fusion_memory_threshold bytes of reads, because on CUDA a
launch costs little next to the memory a fusion saves. On the opencl device a launch costs
more than a small kernel's work (about 10 µs to enqueue on NVIDIA's OpenCL, more than the
6–9 µs a small kernel takes there), so pointwise groups over the same range are fused
whenever Inductor proposes them (they read a buffer in common) and are not far apart: the
key and value updates of a static cache, which share only the 8-byte position they write
at, become one kernel a layer.
"""
from __future__ import annotations

from typing import Any

from torch._inductor.choices import InductorChoices
from torch._inductor.custom_graph_pass import get_hash_for_files


def _opencl_pointwise(node1: Any, node2: Any) -> bool:
    device = node1.get_device()
    return (device is not None and device.type == "opencl" and not node1.is_reduction()
            and not node2.is_reduction() and not node1.is_template() and not node2.is_template())


class OpenCLChoices(InductorChoices):
    @staticmethod
    def can_fuse_horizontal(scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
        if _opencl_pointwise(node1, node2):
            return not scheduler.are_long_distant_nodes(node1, node2)
        return InductorChoices.can_fuse_horizontal(scheduler, node1, node2, shared_data_score)

    def uuid(self) -> str:
        """Inductor's cache key: this file's hash, so a changed heuristic compiles anew."""
        return get_hash_for_files((__file__,), extra="torch_opencl.compile.choices").hex()


def choices() -> OpenCLChoices:
    """The factory config.inductor_choices_class takes."""
    return OpenCLChoices()
