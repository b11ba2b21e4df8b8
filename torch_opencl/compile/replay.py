"""Replayed(call): a compiled graph's `call` (the wrapper's text makes one per graph),
recorded once per signature of its arguments and replayed.

Per signature of the arguments (shapes, strides, dtypes and devices of the tensors, values
of the rest) the first call runs as written (first-use work: kernel builds, the
convolutions' tuning), the second runs while a graph records it (graphs.py), and later
calls replay that recording: one queue of commands, no Python, dispatcher or allocation per
kernel. Inputs whose memory changed between the first two calls (a new batch each step) are
copied into tensors of the recording's own before each replay, and copied back if the graph
writes them; inputs at the same memory (parameters, buffers, optimizer state), and inputs in
memory another graph's recording holds (a backward graph's saved activations, the forward's
outputs: they stay put while that recording lives), are read and written where they are.
One found elsewhere later: if it had stayed put for a call at least (a key/value cache that
each generate() makes anew) and its new storage is laid out as the old one, the recording's
commands are pointed at the new buffer (Graph._rebind) and it replays at once; otherwise the
graph records again, reading it where it is now, or copying it from then on if it moves on
every call. 0-dim CPU inputs that the graph only reads (a static cache's lengths, made on the
CPU) are copied in like a batch, where nothing of the graph runs on the CPU (the wrapper says
so: cpu_scalars); graphs with other CPU inputs, or that write a CPU input, run as written.
Outputs are handed out as tensors over the recording's memory; the next replay first moves
the ones the caller still holds to memory of their own (storage_relocate), so a held result
never changes under its holder. Random seeds (dropout) come from tensors the replay refills
from torch's generator each time. A graph that cannot be recorded (it waits for the device:
a CPU fallback, .item()) runs as written from then on. OCLF_COMPILE_REPLAY=0 turns replays
off.
"""
from __future__ import annotations

import atexit
import collections
import logging
import weakref
from typing import Any, Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from opencl_functions import settings
from .. import devices
from ..graphs import Graph, graph
from .recording import (Recording, counters, extent, in_progress, locations, on_cpu, ptr, span, storage, survey,
                        unrecordable_reasons, version)

_ops = torch.ops.oclf
MAX_SIGNATURES = 8
log = logging.getLogger(__name__)


def _replay_enabled() -> bool:
    return settings.get("COMPILE_REPLAY") != "0"


# Every compiled graph's wrapper in this process: Inductor keeps its compiled modules (and so
# their recordings, with the device memory each holds) for the process; release_recordings()
# gives that memory back.
_wrapped: "weakref.WeakSet[Replayed]" = weakref.WeakSet()
# The storages (their addresses) that recordings hold as outputs: how many recordings hold each.
_recorded_memory: collections.Counter = collections.Counter()
# Inputs in another recording's memory are read in place by a graph recorded fewer times than
# this; one recorded again and again (graphs feeding each other whose memory keeps moving)
# copies them as any other moving input.
IN_PLACE_RECORDINGS = 3


def _in_others_memory(a: Any, rec: Recording) -> bool:
    """Whether `a` lives in memory another live recording holds as its output (not `rec`'s own:
    a graph fed its own last result, as a recurrent state, copies it in)."""
    if not isinstance(a, torch.Tensor) or rec.times_recorded >= IN_PLACE_RECORDINGS:
        return False
    where = storage(a)
    own = sum(1 for o, kind in zip(rec.outputs, rec.output_kind) if kind[0] == "memory" and storage(o) == where)
    return _recorded_memory.get(where, 0) > own


def release_recordings() -> None:
    """Drops every compiled graph's recordings and the memory they hold (their next calls
    record again); after it, torch.opencl.empty_cache() frees that memory. For programs that
    compile models and discard them (the tests call it after each compile test)."""
    for wrapper in list(_wrapped):
        for rec in wrapper.recordings.values():
            wrapper._drop(rec)
        wrapper.recordings.clear()


# At exit, before the interpreter's teardown: recordings hold OpenCL objects (kernels, memory)
# that Python may never free at shutdown, and a driver torn down with them still referenced
# can fail in its own destructors (Oclgrind corrupted its heap after a recorded training step).
def _release_at_exit() -> None:
    try:
        release_recordings()
    except Exception:  # a forked child, or a device already failed: nothing more to give back
        pass


atexit.register(_release_at_exit)


class Replayed:
    """A compiled graph's `call`, replayed (see the module's text)."""

    def __init__(self, call: Callable[[list], Any], mutated_inputs: list[int] | tuple = (),
                 cpu_scalars: bool = False) -> None:
        self.call = call
        self.mutated = set(mutated_inputs)
        self.cpu_scalars = cpu_scalars
        self.recordings: collections.OrderedDict[tuple, Recording] = collections.OrderedDict()
        _wrapped.add(self)

    def __del__(self) -> None:
        try:
            for rec in self.recordings.values():
                self._drop(rec)
        except Exception:  # interpreter shutdown: the device may be gone already
            pass

    def __call__(self, args: list) -> Any:
        surveyed = survey(args, self.cpu_scalars) if _replay_enabled() else None
        if surveyed is not None and any(on_cpu(args[i]) for i in self.mutated):
            surveyed = None  # a CPU input the graph writes: run as written
        if surveyed is None:
            counters["plain"] += 1
            return self.call(args)
        key, ptrs, versions = surveyed
        rec = self.recordings.get(key)
        if rec is None:
            rec = self.recordings[key] = Recording()
            while len(self.recordings) > MAX_SIGNATURES:
                self.recordings.popitem(last=False)
        self.recordings.move_to_end(key)
        if rec.failed:
            counters["plain"] += 1
            return self.call(args)
        if rec.first_ptrs is None:
            rec.first_ptrs = ptrs
            rec.first_versions = versions
            counters["plain"] += 1
            return self._run_noting_seeds(rec, args)
        if rec.graph is None:
            return self._record(rec, args)
        moved = [i for i, (p, q) in enumerate(zip(ptrs, rec.input_ptrs)) if p != q and i not in rec.private]
        if moved and rec.replays > 0 and self._follow(rec, args, moved, ptrs):
            counters["rebound"] += 1
            return self._replay(rec, args)
        if moved:
            # An input the recording reads in place moved: record again. After replays with it
            # in place (a key/value cache made anew by each generate()) it is read where it
            # is now; moved on the first call after its recording (a new tensor every call),
            # it is copied into the recording's own from now on.
            copied = set(rec.private) | (set(moved) if rec.replays == 0 else set())
            copied -= {i for i in moved if _in_others_memory(args[i], rec)}
            rec.first_ptrs = [-1 if i in copied else p for i, p in enumerate(ptrs)]
            counters["moved"] += 1
            self._drop(rec)
            return self._record(rec, args)
        changed = [i for i in rec.watched if versions[i] != rec.versions[i]]
        if changed:
            # An input that had not changed before the recording has now (a parameter loaded
            # anew): what the device derived from it then (packed weights) may be in the
            # recording as it was. Record again, deriving anew, and take it as changing.
            for i in changed:
                rec.first_versions[i] = None
            self._drop(rec)
            return self._record(rec, args)
        return self._replay(rec, args)

    @staticmethod
    def _follow(rec: Recording, args: list, moved: list[int], ptrs: list) -> bool:
        """Points the recording at inputs it reads in place that moved, after replays, to new
        storages laid out as the old ones (a key/value cache each generate() makes anew): the
        same bytes at the same offset of their buffers, with nothing derived from the old
        storages (a transposed weight in the recording would stay the old one's), no other
        input sharing an old buffer, and none in the recording's own results. False (nothing
        changed) where that does not hold, or where the recording holds a library call; the
        caller then records again."""
        olds = [rec.locations.get(i) for i in moved]
        if any(old is None or old[3] for old in olds):
            return False
        kept = {loc[0] for j, loc in rec.locations.items() if j not in moved}
        # Its own results fed back (a recurrent state) would be read where the replay writes.
        own = {storage(o) for o, kind in zip(rec.outputs, rec.output_kind) if kind[0] == "memory"}
        if any(storage(args[i]) in own for i in moved):
            return False
        news = locations([args[i] for i in moved])
        moves: dict[int, int] = {}
        for old, new in zip(olds, news):
            if new[1:3] != old[1:3] or old[0] in kept or moves.setdefault(old[0], new[0]) != new[0]:
                return False
        if not rec.graph._rebind(moves):
            return False
        for i, new in zip(moved, news):
            rec.locations[i] = new
            rec.input_ptrs[i] = ptrs[i]
            rec.versions[i] = version(args[i])
            rec.first_versions[i] = None  # changes: never a reason to record again
        rec.watched = [i for i in rec.watched if i not in moved]
        return True

    def _run_noting_seeds(self, rec: Recording, args: list) -> Any:
        in_progress.replayed = rec
        try:
            return self.call(args)
        finally:
            in_progress.replayed = None

    def _drop(self, rec: Recording) -> None:
        # Results a caller still holds live in the memory given back below: moved first (a
        # graph recorded again, or fed its own last result, reads them after this).
        self._move_held_outputs(rec)
        for output, kind in zip(rec.outputs, rec.output_kind):
            if kind[0] == "memory":
                where = storage(output)
                _recorded_memory[where] -= 1
                if _recorded_memory[where] <= 0:
                    del _recorded_memory[where]
        if rec.graph is not None:
            rec.graph.reset()
        rec.graph, rec.outputs, rec.output_kind, rec.private = None, [], [], {}

    def _record(self, rec: Recording, args: list) -> Any:
        call_args = list(args)
        rec.private = {}
        device = self._device(args)
        for i, a in enumerate(args):
            if on_cpu(a) or (isinstance(a, torch.Tensor) and ptr(a) != rec.first_ptrs[i]
                              and (rec.first_ptrs[i] == -1 or not _in_others_memory(a, rec))):
                # (a 0-dim CPU input is copied to the device before each replay, like a batch)
                rec.private[i] = torch.empty(extent(a), dtype=a.dtype, device=device)
                rec.private[i].copy_(span(a))
                call_args[i] = rec.private[i].as_strided(a.shape, a.stride(), 0)
        rec.input_ptrs = [ptr(a) for a in call_args]
        rec.locations = {}
        rec.versions = [version(a) for a in args]
        rec.seed_tensors = [(torch.empty(n, dtype=torch.int64, device=self._device(args)), low, high)
                            for n, low, high in rec.seed_counts]
        rec.refill_seeds()
        backups = {i: args[i].clone() for i in self.mutated if isinstance(args[i], torch.Tensor)}
        rec.graph, rec.seed_cursor, rec.replays = Graph(), 0, 0
        rec.times_recorded += 1
        in_progress.replayed = rec
        try:
            with graph(rec.graph):
                outputs = self.call(list(call_args))
        except RuntimeError as err:
            # It waits for the device (a CPU fallback, .item()): undo its writes, run as written.
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            unrecordable_reasons.append(reason)
            log.info("a compiled graph runs unrecorded from now on: %s", reason)
            for i, saved in backups.items():
                args[i].copy_(saved)
            rec.failed = True
            self._drop(rec)
            counters["unrecordable"] += 1
            counters["plain"] += 1
            return self.call(args)
        finally:
            in_progress.replayed = None
        for i in self.mutated:
            if i in rec.private:
                span(args[i]).copy_(rec.private[i])
        counters["recorded"] += 1
        rec.watched = [i for i, v in enumerate(rec.versions)
                       if i not in rec.private and v is not None and rec.first_versions[i] == v]
        read_in_place = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in rec.private]
        rec.locations = dict(zip(read_in_place, locations([args[i] for i in read_in_place])))
        rec.outputs = list(outputs)
        rec.output_kind = [self._kind(o, call_args, rec) for o in rec.outputs]
        _recorded_memory.update(storage(o) for o, kind in zip(rec.outputs, rec.output_kind) if kind[0] == "memory")
        args.clear()
        return self._hand_out(rec, call_args_for_views=None)

    @staticmethod
    def _device(args: list) -> torch.device:
        """The device of the graph's first opencl input (the current device when none is)."""
        found = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "opencl"), None)
        return found if found is not None else torch.device("opencl", devices.current_device())

    @staticmethod
    def _kind(output: Any, call_args: list, rec: Recording) -> tuple:
        if not isinstance(output, torch.Tensor) or output.device.type != "opencl":
            return ("value",)
        where = storage(output)
        for j, a in enumerate(call_args):
            if j not in rec.private and isinstance(a, torch.Tensor) and storage(a) == where:
                return ("input", j)
        return ("memory",)

    def _replay(self, rec: Recording, args: list) -> Any:
        self._move_held_outputs(rec)
        for i, private in rec.private.items():
            private.copy_(span(args[i]))
        rec.refill_seeds()
        rec.graph.replay()
        rec.replays += 1
        counters["replayed"] += 1
        # The inputs the graph writes in place moved on, as after an in-place operation
        # (buffers the device derives from a tensor are kept per version).
        written = [args[i] for i in self.mutated if isinstance(args[i], torch.Tensor) and not args[i].is_inference()]
        if written:
            torch.autograd.graph.increment_version(written)
        for i in self.mutated:
            if i in rec.private:
                span(args[i]).copy_(rec.private[i])
        views = list(args)
        args.clear()
        return self._hand_out(rec, views)

    def _move_held_outputs(self, rec: Recording) -> None:
        for ref in rec.handed_out:
            if not ref.expired():
                held = torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
                holder = torch.empty(0, dtype=torch.uint8, device=held.device).set_(held)
                _ops.storage_relocate(holder)
                counters["relocated"] += 1
        rec.handed_out = []

    def _hand_out(self, rec: Recording, call_args_for_views: list | None) -> tuple:
        handed = []
        for output, kind in zip(rec.outputs, rec.output_kind):
            if kind[0] == "memory":
                alias = _ops.storage_alias(output)
                rec.handed_out.append(StorageWeakRef(alias.untyped_storage()))
                handed.append(alias)
            elif kind[0] == "input" and call_args_for_views is not None:
                source = call_args_for_views[kind[1]]
                handed.append(source.as_strided(output.shape, output.stride(), output.storage_offset()))
            else:
                handed.append(output)
        return tuple(handed)
