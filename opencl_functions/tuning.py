"""When kernels are tuned, and how a timed run keeps tuning out of what it times.

Tuning at first use (runtime/tuning.hpp): the first call of a shape that the tuning cache
lacks measures a few configurations of its kernel and keeps the fastest, within
OCLF_TUNE_BUDGET seconds per process (program builds of the candidates included); later
processes read the choice from the cache. That first call can take seconds where the
kernel takes milliseconds, so a timing that includes it says nothing about the kernel.
This module is the one place that says when tuning happens:

- at first use: any call, while the process's budget lasts (OCLF_TUNE=1, the default);
- ahead of time: `make tune` sweeps every shape of the benchmarks' models (sweeping());
- ahead of a timed run: warm_up(run, what) runs the workload once, untimed, so that its
  program builds and its tuning happen there; the tuning, when there is any, is announced
  on stderr (one line per process, a progress bar on a terminal); paused() then keeps any
  shape the warm-up missed from being measured inside the timed region.

    mode(), budget(), cache_folder()      the settings, read now
    spent()                               seconds this process spent measuring
    warm_up(run, what) -> FirstCall       the untimed first call; FirstCall.note() says what it did
    paused(), sweeping()                  context managers: no measuring; measure every shape again

Every demo and benchmark times through these, and prints FirstCall.note() beside its figures.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Tuple, TypeVar

from . import settings

T = TypeVar("T")
MODES = ("1", "0", "cache", "sweep")
POLL_S = 0.1  # how often the announcement reads the seconds spent
_announced = False  # the announcement is made once per process


def mode() -> str:
    """OCLF_TUNE, read now: "1" (at first use, within the budget), "0" (never: the defaults),
    "cache" (read the cache, never measure) or "sweep" (measure every shape, no budget)."""
    value = settings.get("TUNE", "1")
    if value not in MODES:
        raise ValueError(f"{settings.variable('TUNE')} must be one of {', '.join(MODES)}, got {value!r}")
    return value


def budget() -> float:
    """OCLF_TUNE_BUDGET, read now: the seconds tuning at first use may take per process."""
    value = settings.get("TUNE_BUDGET", "5")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{settings.variable('TUNE_BUDGET')} must be a number of seconds >= 0, got {value!r}")
    return seconds


def cache_folder() -> str:
    """The folder of the tuning cache (and, by default, of the program binaries)."""
    if settings.get("TUNE_DIR"):
        return settings.get("TUNE_DIR")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "opencl_functions")


def _core():
    from . import _core as core

    return core


def spent() -> float:
    """Seconds this process has spent measuring candidates on the current device."""
    return _core().tuning_seconds()


def _cached_choices() -> Optional[int]:
    """How many choices the current device's cache file holds (None without a file to read)."""
    path = _core().tuning_cache_path()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if line.strip() and not line.startswith("#"))
    except OSError:
        return 0 if path else None


@contextlib.contextmanager
def _tune_set(value: str) -> Iterator[None]:
    """OCLF_TUNE=value inside the block (the runtime reads it at every call), as it was after."""
    saved = os.environ.get("OCLF_TUNE")
    os.environ["OCLF_TUNE"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OCLF_TUNE", None)
        else:
            os.environ["OCLF_TUNE"] = saved


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No measuring inside the block: a shape the cache lacks takes the device's default
    (OCLF_TUNE=cache there when it was 1 or sweep; 0 and cache stay as they are). For timed
    regions, after warm_up()."""
    if mode() in ("1", "sweep"):
        with _tune_set("cache"):
            yield
    else:
        yield


def sweeping() -> contextlib.AbstractContextManager:
    """Every shape measured again with the full candidate lists, no budget (make tune)."""
    return _tune_set("sweep")


@dataclass
class FirstCall:
    """What the untimed first call of a workload did."""

    what: str
    seconds: float  # the whole call
    tuning_s: float  # of it, measuring candidates
    shapes_tuned: Optional[int]  # choices added to the cache file (None: no file to count in)
    programs_built: int  # OpenCL programs compiled from source
    programs_loaded: int  # made from binaries an earlier process stored
    mode: str
    budget_s: float

    def note(self) -> str:
        """One sentence for the demos' and benchmarks' output: what the first call did and that
        the timings shown leave it out."""
        parts = []
        if self.tuning_s > 0:
            shapes = f"{self.shapes_tuned} shape(s), " if self.shapes_tuned else ""
            parts.append(f"tuning {shapes}{self.tuning_s:.1f} s (budget {self.budget_s:g} s a process, "
                         f"OCLF_TUNE_BUDGET; cached, so later runs skip it)")
        elif self.mode == "0":
            parts.append("no tuning (OCLF_TUNE=0: the defaults)")
        elif self.mode == "1" and self.budget_s > 0:
            parts.append("no tuning (the cache held every shape, or none needed it, or the budget was spent)")
        else:
            parts.append(f"no tuning (OCLF_TUNE={self.mode})")
        made = []
        if self.programs_built:
            made.append(f"{self.programs_built} built")
        if self.programs_loaded:
            made.append(f"{self.programs_loaded} loaded from the program cache")
        if made:
            parts.append(f"OpenCL programs {', '.join(made)}")
        return (f"first call of {self.what}, untimed: {self.seconds:.2f} s ({'; '.join(parts)}); "
                f"the OpenCL times shown leave it out")


class _Announcer:
    """While a warm-up runs, watches the seconds spent tuning; the first time in the process
    that they grow, says on stderr what is tuned and for how long: a progress bar of the
    budget on a terminal, else one line. The budget is checked between candidates, so a
    candidate under way (a program build and a few runs) may take the tuning past it."""

    def __init__(self, what: str, index: int, start_s: float, budget_s: float):
        self.what, self.index, self.start_s, self.budget_s = what, index, start_s, budget_s
        self.bar = None  # the progress bar on a terminal
        self.said = False  # announced
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="oclf-tuning-announcer", daemon=True)

    def __enter__(self) -> "_Announcer":
        if not _announced and mode() == "1" and self.budget_s > self.start_s:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        started = self.thread.ident is not None
        if started and not self.said and _core().tuning_seconds() > self.start_s:
            self._announce()  # tuning that ended between two looks (a loaded machine): said now
        if self.bar is not None:
            self._update()
            self.bar.close()
            self.bar = None

    def _watch(self) -> None:
        core = _core()
        core.set_current_device(self.index)  # this thread reads the warm-up's device (an atomic count)
        while not self.stopping.wait(POLL_S):
            if not self.said and core.tuning_seconds() > self.start_s:
                self._announce()
            if self.bar is None and self.said:
                return  # a line said it: nothing to update
            self._update()

    def _announce(self) -> None:
        global _announced
        _announced = self.said = True
        left = self.budget_s - self.start_s
        text = f"tuning {self.what}: measuring the shapes the tuning cache lacks"
        if not sys.stderr.isatty():
            print(f"{text}, for about {left:.0f} s (OCLF_TUNE_BUDGET; cached in {cache_folder()} for later runs; "
                  f"OCLF_TUNE=0 skips it); nothing is timed meanwhile", file=sys.stderr, flush=True)
            return
        try:
            from tqdm import tqdm
        except ImportError:
            print(f"{text}, for about {left:.0f} s (OCLF_TUNE_BUDGET)", file=sys.stderr, flush=True)
            return
        self.bar = tqdm(total=round(left, 1), desc=text, file=sys.stderr, dynamic_ncols=True, leave=True,
                        bar_format="{desc}: {n:.1f} of about {total:.0f} s |{bar}| (OCLF_TUNE_BUDGET)")

    def _update(self) -> None:
        if self.bar is not None:
            self.bar.n = round(_core().tuning_seconds() - self.start_s, 1)  # past the budget: says so
            self.bar.refresh()


def warm_up(run: Callable[[], T], what: str) -> Tuple[T, FirstCall]:
    """run() once, untimed, as the first call of a workload that is timed next: its program
    builds and its tuning at first use happen here (announced on stderr when it tunes). Returns
    run()'s result and a FirstCall; time the workload afterwards inside paused()."""
    core = _core()
    index = core.current_device()
    start_s, choices = spent(), _cached_choices()
    programs = core.program_cache(index)
    tune_mode, budget_s = mode(), budget()
    t0 = time.perf_counter()
    with _Announcer(what, index, start_s, budget_s):
        result = run()
    seconds = time.perf_counter() - t0
    after = core.program_cache(index)
    choices_after = _cached_choices()
    tuned = None if choices is None or choices_after is None else choices_after - choices
    first = FirstCall(what, seconds, spent() - start_s, tuned, after["programs_built"] - programs["programs_built"],
                      after["programs_loaded"] - programs["programs_loaded"], tune_mode, budget_s)
    return result, first
