"""torch's OpInfo database (op_db) on the `opencl` device, in child processes a crash cannot hide in.

    python -m extras.validation.opdb                   the default part of the database (see
                                                       select()), at most DEFAULT_MAX_SAMPLES
                                                       samples per op
    python -m extras.validation.opdb --all             every op with float32 samples
    python -m extras.validation.opdb --ops cat,sum -v  named ops, each sample's verdict printed
    python -m extras.validation.opdb --all --json F    the counts and per-op verdicts as JSON too

Every float32 sample of an op runs on the CPU and on the device, in its function, in-place
and out= forms; each run ends in one verdict (VERDICTS; extras.validation.opdb_child says
what each means), plus two that only the parent can give:

    crashed    the process died (a signal, an abort) while running it
    hung       it ran past the time limit

This process splits the ops into chunks and runs each in a child (opdb_child), which
appends one JSON line to a log before each run ("start") and one after ("done"); when the
child dies or stops writing, the last start names the run that killed it, and a new child
resumes the chunk after it. Children run with OCLF_FALLBACK=silent: the CPU fallback is
allowed, wrong answers are not. The device's table of registrations
(docs/device/registrations.md) comes from a recorded run (extras.validation.opdb_table:
--record, --tables).
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ("right", "refused", "wrong", "crashed", "hung", "unchecked")
# The default part runs at most this many samples of an op (max_pool2d's backward has over a
# thousand), spread over its list.
DEFAULT_MAX_SAMPLES = 40
# The command that runs a chunk of ops (its arguments follow: --log, --keys, ...).
CHILD = ("extras.validation.opdb_child",)
SAMPLE_TIMEOUT_S = 180.0   # one run past this is "hung" (a first kernel build can take seconds)


# ---------------------------------------------------------------------------------------------
# The database: which ops run.

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
    import torch_opencl  # noqa: F401

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
                "per_op": dict(sorted(self.ops().items())), "problems": [r.__dict__ for r in self.problems()],
                "refusals": self.refusals()}

    def refusals(self) -> Dict[str, Dict[str, int]]:
        """Per op: the exceptions its refused runs raised (their first line), with counts."""
        table: Dict[str, Dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
        for r in self.records:
            if r.verdict == "refused":
                table[r.op][r.detail] += 1
        return {op: dict(sorted(c.items())) for op, c in sorted(table.items())}

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
              crash_at: str = "", max_samples: int = 0, child: Sequence[str] = CHILD) -> List[Record]:
    """Runs one chunk of ops in children until every run has a verdict. `child`: the module
    (and arguments) that runs them (extras.validation.moduledb runs torch's module_db through
    the same parent)."""
    env = dict(os.environ, OCLF_FALLBACK="silent", PYTHONUNBUFFERED="1")
    records: List[Record] = []
    with tempfile.TemporaryDirectory(prefix="opdb-") as tmp:
        log = Path(tmp) / "log.jsonl"
        resume: Optional[Tuple[int, int, int]] = None
        while True:
            command = [sys.executable, "-m", *child, "--log", str(log), "--keys", ",".join(keys)]
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
        child: Sequence[str] = CHILD) -> Report:
    """Runs the ops named by `keys` (op_key) in chunks of `chunk` ops (0: one chunk per job, as
    each child pays for importing torch and op_db), `jobs` children at a time; at most
    `max_samples` samples of an op, spread over its list (0: all)."""
    start = time.monotonic()
    jobs = max(1, jobs)
    chunk = chunk or max(1, -(-len(keys) // jobs))
    chunks = [keys[i:i + chunk] for i in range(0, len(keys), chunk)]
    report = Report()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for records in pool.map(lambda c: run_chunk(c, verbose=verbose, max_samples=max_samples, child=child),
                                chunks):
            report.records.extend(records)
    report.seconds = time.monotonic() - start
    return report


def main(argv: Optional[List[str]] = None) -> int:
    from extras.validation.opdb_table import RECORD, TABLES_DOC, write_tables

    parser = argparse.ArgumentParser(prog="python -m extras.validation.opdb", description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every op with float32 samples")
    parser.add_argument("--ops", help="comma-separated op names (op_db's name, or name.variant)")
    parser.add_argument("--jobs", type=int, default=2, help="children at a time")
    parser.add_argument("--chunk", type=int, default=0, help="ops per child (default: the ops shared out over --jobs)")
    parser.add_argument("--json", help="write the counts and per-op verdicts here")
    parser.add_argument("--record", action="store_true",
                        help=f"keep the run in {RECORD.relative_to(ROOT)} and write {TABLES_DOC.relative_to(ROOT)} "
                             "from it")
    parser.add_argument("--tables", "--readme", action="store_true",
                        help=f"write {TABLES_DOC.relative_to(ROOT)} from {RECORD.relative_to(ROOT)} and the "
                             "registrations; no run")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--max-samples", type=int, default=None,
                        help=f"samples per op, spread over its list (default: {DEFAULT_MAX_SAMPLES} for the default part, "
                             "all with --all or --ops; 0: all)")
    args = parser.parse_args(argv)

    if args.tables:
        write_tables(json.loads(RECORD.read_text()))
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
        write_tables(json.loads(RECORD.read_text()))
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
