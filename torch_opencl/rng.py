"""Random numbers of the opencl devices, as torch.cuda's are for CUDA:

    torch.manual_seed(0)                     # seeds every device's default generator too
    torch.opencl.manual_seed(0)              # the current device's; manual_seed_all: every device's
    g = torch.Generator(device="opencl")     # a generator of its own: torch.randn(..., generator=g)
    state = torch.opencl.get_rng_state()     # saved and restored (torch.random.fork_rng uses these)

The device's random numbers are a stream of their own, as CUDA's are, not the CPU
generator's: the same seed gives other numbers on the CPU and on the device. Each device has
a default generator (csrc/runtime/generator.h): a Philox 4x32-10 key (the seed) and counter
(the offset), its state 16 bytes in CUDA's layout, the seed (uint64) then the offset (int64),
which torch's distributed RNG tracker (DTensor) reads and writes. A random kernel drawing n
numbers gives element i number offset + i of the stream (a word of the block of counter
(offset + i) / 4) and moves the offset on by n rounded up to a multiple of 4, so seeding repeats dropout, rand, randn and the initialisations, and a
saved state repeats what follows it (fork_rng, activation checkpointing's recomputed forward).
"""
from __future__ import annotations

from typing import List

import torch

from .devices import device_count, device_index

__all__ = ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
           "get_rng_state_all", "set_rng_state_all"]

_ops = torch.ops.oclf


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    if device_count():
        _ops.manual_seed(-1, int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's default generator (torch.manual_seed calls this)."""
    for index in range(device_count()):
        _ops.manual_seed(index, int(seed))


def seed() -> None:
    """Seeds the current device's default generator with a random number."""
    if device_count():
        _ops.seed(-1)


def seed_all() -> None:
    """Seeds every device's default generator with one random number."""
    if device_count():
        manual_seed_all(int(_ops.seed(0)))


def initial_seed() -> int:
    """The current device's default generator's seed."""
    return int(_ops.initial_seed(-1))


def get_rng_state(device=None) -> torch.Tensor:
    """A device's default generator's state: 16 bytes (a uint8 CPU tensor), the seed then the
    offset, as torch.cuda.get_rng_state() gives."""
    return _ops.get_rng_state(device_index(device))


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    """Restores a state from get_rng_state() (16 bytes; a state of another size is refused)."""
    _ops.set_rng_state(device_index(device), new_state)


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: List[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
