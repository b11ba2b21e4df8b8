"""torch's OpInfo database (op_db) on the `opencl` device, in child processes a crash cannot hide in.

    python -m utils.opdb                     the default part of the database (see select()),
                                             at most DEFAULT_MAX_SAMPLES samples per op
    python -m utils.opdb --all               every op with float32 samples
    python -m utils.opdb --ops cat,sum -v    named ops, each sample's verdict printed
    python -m utils.opdb --all --json F      the counts and per-op verdicts as JSON too

Every float32 sample of an op (OpInfo's sample_inputs) runs on the CPU and, moved to the
device, on `opencl`; the function, its in-place variant and its out= form where OpInfo lists
them. Each run ends in one verdict:

    right      the device's result matches the CPU's (assert_close with float32 tolerances; on a
               miss, within a few times the CPU's own error against a float64 reference)
    refused    the device raised a Python exception the CPU did not (the op is refused, clearly)
    wrong      a result differs from the CPU's, or has another shape or dtype
    crashed    the process died (a signal, an abort) while running it
    hung       it ran past the time limit
    unchecked  OpInfo says the output cannot be compared (random, undefined): it ran, and its
               shapes and dtypes match the CPU's

A run is "native" when no operator went through the CPU fallback (fallback_ops()).

The parent process splits the ops into chunks and runs each in a child (`--child`), which
appends one JSON line to a log before each run ("start") and one after ("done"); when the
child dies or stops writing, the last start names the run that killed it, and a new child
resumes the chunk after it. Children run with OCLF_FALLBACK=silent: the CPU fallback is
allowed, wrong answers are not.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
VERDICTS = ("right", "refused", "wrong", "crashed", "hung", "unchecked")
# float32 results: torch's assert_close defaults for float32 are 1.3e-6 / 1e-5; kernels that
# sum in another order (reductions, products) get a float64 second opinion instead of wider ones.
ATOL, RTOL = 1e-5, 1.3e-6
# A miss passes when the device is no further from the float64 result than this many times
# the CPU's float32 result (plus a small floor), i.e. as accurate as float32 arithmetic allows.
DRIFT_FACTOR, DRIFT_ATOL, DRIFT_RTOL = 4.0, 1e-5, 1e-4
# The default part runs at most this many samples of an op (max_pool2d's backward has over a
# thousand), spread over its list.
DEFAULT_MAX_SAMPLES = 40
SAMPLE_TIMEOUT_S = 180.0   # one run past this is "hung" (a first kernel build can take seconds)


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def float32_ops() -> list:
    """op_db entries with float32 samples on the CPU (what the device receives)."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch's test helpers warn about optional test packages
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if op.supports_dtype(torch.float32, "cpu")]


def native_aten_names() -> set:
    """Base names of the aten operators registered for the device (add, sum, _softmax, ...)."""
    import torch
    import opencl_functions.device  # noqa: F401

    names = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return {n.split("::", 1)[1].split(".", 1)[0] for n in names if n.startswith("aten::")}


def _candidate_names(op) -> set:
    short = op.name.rsplit(".", 1)[-1]
    aten = (op.aten_name or "").rsplit(".", 1)[-1]
    names = {short, aten, short.rstrip("_")}
    return names | {"_" + n for n in names} | {f"native_{n}" for n in names} | {f"{n}_with_indices" for n in names}


def select(ops: list, native: set, spread: int = 4) -> list:
    """The default part: every op whose name matches a native registration, and every
    `spread`-th of the others (in op_db's order, so the choice is the same each run)."""
    chosen, others = [], 0
    for op in ops:
        if _candidate_names(op) & native:
            chosen.append(op)
        else:
            if others % spread == 0:
                chosen.append(op)
            others += 1
    return chosen


# ---------------------------------------------------------------------------------------------
# The child: runs the samples of some ops, logging before and after each run.

def _not_comparable(op) -> Optional[str]:
    """OpInfo's own word that the CPU and another device cannot be compared for float32:
    a skip of TestCommon.test_compare_cpu (random outputs, undefined results)."""
    import torch
    import unittest

    for info in getattr(op, "decorators", ()):
        if not hasattr(info, "is_active"):
            continue
        if not info.is_active("TestCommon", "test_compare_cpu", "privateuse1", torch.float32, {}):
            continue
        for decorator in info.decorators:
            if decorator is unittest.expectedFailure:
                continue
            cells = [c.cell_contents for c in (getattr(decorator, "__closure__", None) or ())]
            reason = next((c for c in cells if isinstance(c, str)), "skipped")
            return reason
    if getattr(op, "is_factory_function", False) and op.name.startswith(("empty", "new_empty")):
        return "uninitialised output"
    return None


def _samples(op) -> list:
    import torch

    torch.manual_seed(zlib.crc32(op_key(op).encode()))
    return list(op.sample_inputs("cpu", torch.float32, requires_grad=False))


def _tensors(value) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _compare(device_value, cpu_value, rerun64=None) -> Optional[str]:
    """None when the results agree, else what differs."""
    import torch
    from torch.utils._pytree import tree_flatten

    dev_leaves, dev_spec = tree_flatten(device_value)
    cpu_leaves, cpu_spec = tree_flatten(cpu_value)
    if len(dev_leaves) != len(cpu_leaves):
        return f"{len(dev_leaves)} results, the CPU gives {len(cpu_leaves)}"
    ref64 = None
    for i, (d, c) in enumerate(zip(dev_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor) != isinstance(d, torch.Tensor):
            return f"result {i}: {type(d).__name__}, the CPU gives {type(c).__name__}"
        if not isinstance(c, torch.Tensor):
            if d != c and not (isinstance(c, float) and c != c and d != d):
                return f"result {i}: {d!r}, the CPU gives {c!r}"
            continue
        d = d.detach().cpu()
        c = c.detach()
        if d.shape != c.shape or d.dtype != c.dtype:
            return f"result {i}: {d.dtype}{list(d.shape)}, the CPU gives {c.dtype}{list(c.shape)}"
        try:
            torch.testing.assert_close(d, c, atol=ATOL, rtol=RTOL, equal_nan=True, check_stride=False)
            continue
        except AssertionError as miss:
            first = str(miss).strip().splitlines()
        if not c.is_floating_point() or rerun64 is None:
            return f"result {i}: " + " ".join(first[:4])
        if ref64 is None:
            try:
                ref64 = tree_flatten(rerun64())[0]
            except Exception:  # noqa: BLE001  (no float64 form of this sample)
                return f"result {i}: " + " ".join(first[:4])
        r = ref64[i].detach().to(torch.float64)
        both_nan = torch.isnan(d) & torch.isnan(c)
        d64, c64 = d.to(torch.float64).masked_fill(both_nan, 0), c.to(torch.float64).masked_fill(both_nan, 0)
        r = r.masked_fill(both_nan, 0)
        same_inf = torch.isinf(d64) & (d64 == c64)
        err_dev = (d64 - r).abs().masked_fill(same_inf, 0)
        err_cpu = (c64 - r).abs().masked_fill(same_inf, 0)
        bound = DRIFT_FACTOR * err_cpu + DRIFT_ATOL + DRIFT_RTOL * r.abs().masked_fill(same_inf, 0)
        if not bool((err_dev <= bound).all()):
            worst = int((err_dev - bound).argmax())
            return (f"result {i}: at flat index {worst} the device gives {d.flatten()[worst].item()!r}, "
                    f"the CPU {c.flatten()[worst].item()!r}, float64 {r.flatten()[worst].item()!r}")
    return None


def _variants(op) -> List[str]:
    out = ["fn"]
    if op.inplace_variant is not None:
        out.append("inplace")
    if op.supports_out:
        out.append("out")
    return out


def _call(op, variant: str, sample, out=None):
    if variant == "inplace":
        return op.inplace_variant(sample.input, *sample.args, **sample.kwargs)
    if variant == "out":
        return op(sample.input, *sample.args, **sample.kwargs, out=out)
    return op(sample.input, *sample.args, **sample.kwargs)


def _on_device(sample):
    """The sample with a factory's `device` argument pointing at the device too."""
    import torch

    if "device" in sample.kwargs:
        sample.kwargs = dict(sample.kwargs, device=torch.device("opencl"))
    return sample


class _Reached:
    """The aten operators a call dispatches (as the device's registrations name them, e.g.
    "sum.dim_IntList"), kept in `names`: a TorchDispatchMode, which sees the operators that
    reach the backend, after torch's composite ones have decomposed."""

    def __init__(self, names: set):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.names = names

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                names.add(func.name().split("::", 1)[-1] if func.namespace == "aten" else func.name())
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def run_one(op, variant: str, sample, reached: Optional[set] = None) -> Tuple[str, bool, str]:
    """(verdict, native, detail) of one variant of one sample; `reached` gets the aten
    operators its device call dispatched."""
    import torch
    import opencl_functions.device as device

    def to(where, dtype=None):
        def move(t):
            if isinstance(t, torch.dtype):
                return t
            t = t.detach().to(where, copy=True)
            return t.to(dtype) if dtype is not None and t.is_floating_point() else t
        return move

    if variant == "inplace" and sample.broadcasts_input:
        return "skip", True, "the in-place form cannot broadcast its input"
    cpu_sample = sample.transform(to("cpu"))
    try:
        if variant == "out":
            plain = _call(op, "fn", sample.transform(to("cpu")))
            if not isinstance(plain, torch.Tensor):
                return "skip", True, "out= checked for single-tensor results"
            cpu_out = torch.empty_like(plain)
            expected = _call(op, "out", cpu_sample, cpu_out)
        else:
            expected = _call(op, variant, cpu_sample)
    except Exception as error:  # noqa: BLE001  (a sample the CPU refuses says nothing of the device)
        return "skip", True, f"the CPU raises {type(error).__name__}"

    dev_sample = _on_device(sample.transform(to("opencl")))
    device.reset_fallback_ops()
    reached = _Reached(set() if reached is None else reached)
    try:
        if variant == "out":
            dev_out = torch.empty(cpu_out.shape, dtype=cpu_out.dtype, device="opencl")
            with reached:
                got = _call(op, "out", dev_sample, dev_out)
            if got is not dev_out and got.data_ptr() != dev_out.data_ptr():
                return "wrong", not device.fallback_ops(), "out= returned another tensor than out"
        else:
            with reached:
                got = _call(op, variant, dev_sample)
        torch.opencl.synchronize()
    except Exception as error:  # noqa: BLE001  (any Python exception is a refusal, and is recorded)
        message = str(error).strip().splitlines()[0] if str(error).strip() else "(no message)"
        return "refused", not device.fallback_ops(), f"{type(error).__name__}: {message[:300]}"
    native = not device.fallback_ops()
    detail = ",".join(sorted(device.fallback_ops()))

    reason = _not_comparable(op)
    if reason is not None:
        shapes = [(t.shape, t.dtype) for t in _tensors(got)]
        if shapes != [(t.shape, t.dtype) for t in _tensors(expected)]:
            return "wrong", native, f"shapes or dtypes differ ({reason})"
        return "unchecked", native, reason

    def rerun64():
        s64 = sample.transform(to("cpu", torch.float64))
        if variant == "out":
            return _call(op, "fn", s64)
        result = _call(op, variant, s64)
        return (result, s64.input) if variant == "inplace" else result

    if variant == "inplace":
        got, expected = (got, dev_sample.input), (expected, cpu_sample.input)
    problem = _compare(got, expected, rerun64)
    if problem is None and variant != "inplace":
        # Inputs the op must not change (an out-of-place op writing into its input is wrong).
        problem = _compare(_tensors((dev_sample.input, dev_sample.args, dev_sample.kwargs)),
                           _tensors((cpu_sample.input, cpu_sample.args, cpu_sample.kwargs)))
        problem = problem and f"changed an input: {problem}"
    if problem:
        return "wrong", native, problem
    return "right", native, detail


def spread(samples: list, most: int) -> List[tuple]:
    """(index, sample) pairs: all of them, or `most` spread evenly over the list (0: no limit)."""
    if not most or len(samples) <= most:
        return list(enumerate(samples))
    picked = sorted({round(k * (len(samples) - 1) / (most - 1)) for k in range(most)}) if most > 1 else [0]
    return [(k, samples[k]) for k in picked]


def child(keys: List[str], log: Path, resume: Optional[Tuple[int, int, int]], crash_at: str = "",
          max_samples: int = 0) -> None:
    """Runs the given ops' samples from `resume` (op, sample, variant positions) on, one log line
    before each run and one after. `crash_at` ("op#sample"): that sample's function form reads
    address 0 (how the tests prove that a crash is caught and blamed on its sample)."""
    import ctypes
    import warnings

    import opencl_functions.device  # noqa: F401

    warnings.simplefilter("ignore")
    by_key = {op_key(op): op for op in float32_ops()}
    with log.open("a", buffering=1) as out:
        for o, key in enumerate(keys):
            if resume and o < resume[0]:
                continue
            op = by_key[key]
            try:
                samples = _samples(op)
            except Exception as error:  # noqa: BLE001
                out.write(json.dumps({"event": "done", "op": key, "o": o, "s": -1, "v": "fn", "verdict": "skip",
                                      "native": True, "detail": f"no samples: {error}"[:300]}) + "\n")
                continue
            variants = _variants(op)
            for s, sample in spread(samples, max_samples):
                for v, variant in enumerate(variants):
                    if resume and (o, s, v) <= resume:
                        continue
                    where = {"op": key, "o": o, "s": s, "v": variant, "vi": v}
                    out.write(json.dumps({"event": "start", **where}) + "\n")
                    if crash_at == f"{key}#{s}" and v == 0:
                        ctypes.string_at(0)  # a read of address 0: a real segmentation fault
                    reached: set = set()
                    verdict, native, detail = run_one(op, variant, sample, reached)
                    out.write(json.dumps({"event": "done", **where, "verdict": verdict, "native": native,
                                          "detail": detail, "aten": sorted(reached)}) + "\n")


# ---------------------------------------------------------------------------------------------
# The parent: chunks, children, and what killed them.

@dataclass
class Record:
    op: str
    sample: int
    variant: str
    verdict: str
    native: bool
    detail: str
    aten: List[str] = field(default_factory=list)


@dataclass
class Report:
    records: List[Record] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> Dict[str, int]:
        c = collections.Counter(r.verdict for r in self.records if r.verdict != "skip")
        return {v: c.get(v, 0) for v in VERDICTS}

    def ops(self) -> Dict[str, Dict[str, int]]:
        """Per op: runs of each verdict, and how many of the right ones ran natively."""
        table: Dict[str, Dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
        for r in self.records:
            if r.verdict == "skip":
                continue
            table[r.op][r.verdict] += 1
            if r.verdict in ("right", "unchecked") and r.native:
                table[r.op]["native"] += 1
        return {k: dict(v) for k, v in table.items()}

    def served(self) -> Tuple[int, int]:
        """(ops with every run right or unchecked, and of those the ones served natively throughout)."""
        full = native = 0
        for row in self.ops().values():
            runs = sum(row.get(v, 0) for v in VERDICTS)
            ok = row.get("right", 0) + row.get("unchecked", 0)
            if runs and ok == runs:
                full += 1
                native += row.get("native", 0) == runs
        return full, native

    def summary(self) -> str:
        c = self.counts()
        served = c["right"] + c["unchecked"]
        natives = sum(1 for r in self.records if r.verdict in ("right", "unchecked") and r.native)
        ops_full, ops_native = self.served()
        lines = [
            f"op_db on opencl: {len(self.ops())} ops, {sum(c.values())} runs in {self.seconds:.0f} s",
            "  " + ", ".join(f"{v} {c[v]}" for v in VERDICTS),
            f"  native share of the right and unchecked runs: {natives}/{served}"
            f" ({100.0 * natives / max(served, 1):.1f}%)",
            f"  ops served (every run right): {ops_full}, natively throughout: {ops_native}",
        ]
        return "\n".join(lines)

    def aten(self) -> Dict[str, List[int]]:
        """Per aten operator: [runs right or unchecked, runs] over the runs that dispatched it."""
        table: Dict[str, List[int]] = collections.defaultdict(lambda: [0, 0])
        for r in self.records:
            if r.verdict == "skip":
                continue
            for name in r.aten:
                table[name][0] += r.verdict in ("right", "unchecked")
                table[name][1] += 1
        return dict(table)

    def to_json(self, scope: str) -> dict:
        c = self.counts()
        natives = sum(1 for r in self.records if r.verdict in ("right", "unchecked") and r.native)
        return {"scope": scope, "counts": c, "native": natives, "ops": len(self.ops()), "served": list(self.served()),
                "seconds": round(self.seconds), "aten": dict(sorted(self.aten().items())),
                "per_op": dict(sorted(self.ops().items())), "problems": [r.__dict__ for r in self.problems()]}

    def problems(self) -> List[Record]:
        return [r for r in self.records if r.verdict in ("wrong", "crashed", "hung")]


def _read(log: Path) -> List[dict]:
    if not log.exists():
        return []
    events = []
    for line in log.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a crash
    return events


def _death(returncode: int, stderr: str) -> str:
    """How a child ended: the signal or exit status and its last words on stderr."""
    import signal

    how = f"exit {returncode}"
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            how = f"signal {-returncode}"
    words = [line for line in stderr.strip().splitlines() if "No CUDA runtime" not in line][-2:]
    return (how + (": " + " | ".join(words) if words else ""))[:300]


def run_chunk(keys: List[str], timeout_s: float = SAMPLE_TIMEOUT_S, verbose: bool = False,
              crash_at: str = "", max_samples: int = 0, runner: str = "utils.opdb") -> List[Record]:
    """Runs one chunk of ops in children until every run has a verdict. `runner`: the module
    whose `--child` runs them (utils.moduledb runs torch's module_db through the same parent)."""
    env = dict(os.environ, OCLF_FALLBACK="silent", PYTHONUNBUFFERED="1")
    env.pop("OCL_FALLBACK", None)
    records: List[Record] = []
    with tempfile.TemporaryDirectory(prefix="opdb-") as tmp:
        log = Path(tmp) / "log.jsonl"
        resume: Optional[Tuple[int, int, int]] = None
        while True:
            command = [sys.executable, "-m", runner, "--child", "--log", str(log), "--keys", ",".join(keys)]
            if resume:
                command += ["--resume", ",".join(map(str, resume))]
            if crash_at:
                command += ["--crash-at", crash_at]
            if max_samples:
                command += ["--max-samples", str(max_samples)]
            errors = Path(tmp) / "stderr.txt"  # a file, not a pipe: a chatty child must not block on it
            with errors.open("w") as err:
                proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
            seen, last_change, hung = -1, time.monotonic(), False
            while proc.poll() is None:
                time.sleep(0.2)
                size = log.stat().st_size if log.exists() else 0
                if size != seen:
                    seen, last_change = size, time.monotonic()
                elif time.monotonic() - last_change > timeout_s:
                    proc.kill()
                    hung = True
            proc.wait()
            stderr = errors.read_text(errors="replace")
            events = _read(log)
            log.write_text("")  # the next child appends its own
            for e in events:
                if e["event"] == "done":
                    records.append(Record(e["op"], e["s"], e["v"], e["verdict"], e["native"], e["detail"], e.get("aten", [])))
                    if verbose:
                        print(f"  {e['op']} #{e['s']} {e['v']}: {e['verdict']} {e['detail']}", flush=True)
            if proc.returncode == 0 and not hung:
                return records
            last_start = next((e for e in reversed(events) if e["event"] == "start"), None)
            finished = last_start is not None and events[-1]["event"] == "done"
            if last_start is None or finished:
                # Died before its first run or between runs: nothing to blame, nothing to resume after.
                where = f"{keys[resume[0]] if resume else keys[0]} (outside a sample)"
                records.append(Record(where, -1, "-", "crashed", False, _death(proc.returncode, stderr)))
                if last_start is None:
                    return records
                resume = (last_start["o"], last_start["s"], last_start["vi"])
                continue
            verdict = "hung" if hung else "crashed"
            detail = ("no output for %.0f s" % timeout_s) if hung else _death(proc.returncode, stderr)
            records.append(Record(last_start["op"], last_start["s"], last_start["v"], verdict, False, detail[:300]))
            if verbose:
                print(f"  {last_start['op']} #{last_start['s']} {last_start['v']}: {verdict} {detail}", flush=True)
            resume = (last_start["o"], last_start["s"], last_start["vi"])


def run(keys: List[str], jobs: int = 2, chunk: int = 0, max_samples: int = 0, verbose: bool = False,
        runner: str = "utils.opdb") -> Report:
    """Runs the ops named by `keys` (op_key) in chunks of `chunk` ops (0: one chunk per job, as
    each child pays for importing torch and op_db), `jobs` children at a time; at most
    `max_samples` samples of an op, spread over its list (0: all)."""
    start = time.monotonic()
    jobs = max(1, jobs)
    chunk = chunk or max(1, -(-len(keys) // jobs))
    chunks = [keys[i:i + chunk] for i in range(0, len(keys), chunk)]
    report = Report()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for records in pool.map(lambda c: run_chunk(c, verbose=verbose, max_samples=max_samples, runner=runner), chunks):
            report.records.extend(records)
    report.seconds = time.monotonic() - start
    return report


# ---------------------------------------------------------------------------------------------
# The device README's table of native operators, from the registrations and a recorded run.

README = ROOT / "opencl_functions" / "device" / "README.md"
RECORD = ROOT / "docs" / "opdb.json"
TABLE = "native-ops"


def registrations() -> Dict[str, List[str]]:
    """The device's aten registrations grouped by operator: add -> [add.Tensor, add_.Tensor, add.out]."""
    import torch
    import opencl_functions.device  # noqa: F401

    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"):
        if not name.startswith("aten::"):
            continue
        full = name[len("aten::"):]
        base = full.split(".", 1)[0]
        if not base.startswith("__"):
            base = base.rstrip("_") or base  # add_ (in-place) beside add
        groups[base].append(full)
    return {k: sorted(v) for k, v in sorted(groups.items(), key=lambda kv: kv[0].lstrip("_"))}


def render(groups: Dict[str, List[str]], record: dict) -> str:
    """The README's table: every registered operator, its forms, and how the recorded op_db
    run's samples that dispatched it fared."""
    c, natives = record["counts"], record["native"]
    ok = c["right"] + c["unchecked"]
    lines = [
        f"torch's OpInfo database (`python -m utils.opdb --all`, {record['scope']}): {record['ops']} ops, "
        f"{sum(c.values())} float32 runs (function, in-place and `out=` forms): " + ", ".join(f"{v} {c[v]}" for v in VERDICTS)
        + f". {natives} of the {ok} right and unchecked runs ({100.0 * natives / max(ok, 1):.0f}%) ran natively, the others "
        f"partly through the CPU fallback; {record['served'][0]} ops were right in every run, {record['served'][1]} "
        "of them natively throughout. \"refused\": the device raised a clear Python exception where the CPU did "
        "not; \"unchecked\": OpInfo says the output cannot be compared (random), and its shapes and dtypes match. "
        "The last column: runs whose device call dispatched the operator, and how many of them were right or "
        "unchecked.",
        "",
        "| operator | registered forms | op_db runs reaching it (right / all) |",
        "| --- | --- | --- |",
    ]
    for base, forms in groups.items():
        reached = [record["aten"][f] for f in forms if f in record["aten"]]
        runs = f"{sum(r[0] for r in reached)} / {sum(r[1] for r in reached)}" if reached else "—"
        lines.append(f"| `{base}` | " + ", ".join(f"`{f}`" for f in forms) + f" | {runs} |")
    return "\n".join(lines)


def readme_block() -> Optional[str]:
    """The table as the README holds it now, without its provenance line."""
    import re

    text = README.read_text()
    found = re.search(rf"<!-- BEGIN TABLE {TABLE} -->\n[^\n]*\n\n(.*?)\n<!-- END TABLE {TABLE} -->", text, re.S)
    return found.group(1) if found else None


def write_readme(record: dict) -> None:
    from utils.doc_tables import write_section
    import torch
    import opencl_functions.device  # noqa: F401

    write_section(README, TABLE, render(registrations(), record), device=torch.opencl.get_device_name())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utils.opdb", description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every op with float32 samples")
    parser.add_argument("--ops", help="comma-separated op names (op_db's name, or name.variant)")
    parser.add_argument("--jobs", type=int, default=2, help="children at a time")
    parser.add_argument("--chunk", type=int, default=0, help="ops per child (default: the ops shared out over --jobs)")
    parser.add_argument("--json", help="write the counts and per-op verdicts here")
    parser.add_argument("--record", action="store_true",
                        help=f"keep the run in {RECORD.relative_to(ROOT)} and write the README's table from it")
    parser.add_argument("--readme", action="store_true",
                        help=f"write the README's table from {RECORD.relative_to(ROOT)} and the registrations; no run")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    parser.add_argument("--crash-at", default="", help=argparse.SUPPRESS)
    parser.add_argument("--max-samples", type=int, default=None,
                        help=f"samples per op, spread over its list (default: {DEFAULT_MAX_SAMPLES} for the default part, "
                             "all with --all or --ops; 0: all)")
    args = parser.parse_args(argv)

    if args.child:
        resume = tuple(int(x) for x in args.resume.split(",")) if args.resume else None
        child(args.keys.split(","), Path(args.log), resume, args.crash_at, args.max_samples or 0)
        return 0

    if args.readme:
        write_readme(json.loads(RECORD.read_text()))
        return 0
    ops = float32_ops()
    scope = "every op with float32 samples" if args.all else "its default part" if not args.ops else "some ops"
    if args.ops:
        wanted = args.ops.split(",")
        keys = [op_key(op) for op in ops if op_key(op) in wanted or op.name in wanted]
    elif args.all:
        keys = [op_key(op) for op in ops]
    else:
        keys = [op_key(op) for op in select(ops, native_aten_names())]
    most = args.max_samples if args.max_samples is not None else 0 if (args.all or args.ops) else DEFAULT_MAX_SAMPLES
    report = run(keys, jobs=args.jobs, chunk=args.chunk, max_samples=most, verbose=args.verbose)
    print(report.summary())
    for r in report.problems():
        print(f"  {r.verdict}: {r.op} sample {r.sample} ({r.variant}): {r.detail}")
    refusals = collections.Counter(r.op for r in report.records if r.verdict == "refused")
    if refusals:
        print("  refused (runs): " + ", ".join(f"{k} {n}" for k, n in refusals.most_common()))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(scope), indent=1) + "\n")
    if args.record:
        RECORD.write_text(json.dumps(report.to_json(scope), indent=1) + "\n")
        write_readme(json.loads(RECORD.read_text()))
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
