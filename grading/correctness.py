"""The correctness step: tests.py's public cases, hidden random cases and two small models,
run in sandboxed children (one for matmul then GPT-2, one for conv2d then the ResNet, so a
conv2d that crashes or hangs costs the conv2d tests only), each output read back with size
limits and compared with torch's answer, computed here.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple


from grading import cases as C
from grading import check
from grading.build import Program
from grading.compare import changed_inputs, read_result, tensor_bytes
from utils.testing import mismatch
from grading.report import POINTS, Report, Test
from grading.workspace import Workspace


def describe_case(case: Dict) -> str:
    """A case in words, as the report shows it."""
    if case["op"] == "conv2d":
        bias = "bias" if case["bias"] is not None else "no bias"
        return (f"conv2d x{tuple(case['x'].shape)} weight{tuple(case['weight'].shape)} {bias} "
                f"stride={tuple(case['stride'])} dilation={tuple(case['dilation'])} groups={case['groups']}")
    if case["op"] == "matmul":
        a, b = C.matmul_operands(case)
        notes = [f"{name} {layout}" for name, layout in (("a", case["a_layout"]), ("b", case["b_layout"]))
                 if layout != "plain"]
        return f"matmul a{tuple(a.shape)} @ b{tuple(b.shape)}" + (f" ({', '.join(notes)})" if notes else "")
    return f"{case['op']} on input {tuple(case['input'].shape)}"


def verdicts(ws: Workspace, program: Program, home: Path, cases: List[Dict], tol: Dict[str, Tuple[float, float]],
             wrapper=(), timeout_s: Optional[float] = None) -> Tuple[List[Optional[str]], Optional[str], str]:
    """Runs cases in one child of `program`. Returns per case None (pass) or what failed, a
    note on the child when it did not end well, and the child's output."""
    result, out_dir = ws.run_child("cases", {"cases": cases}, program.tree, home, wrapper=wrapper,
                                   timeout_s=timeout_s)
    found: List[Optional[str]] = []
    for i, case in enumerate(cases):
        model = case["op"] in ("resnet", "gpt2")
        ref = C.model_reference(case) if model else C.reference(case)
        got = read_result(out_dir / f"{i:03d}.pt", 2 * tensor_bytes(case) + 2 * tensor_bytes(ref) + (1 << 16))
        if "error" in got:
            error = str(got["error"])[:3000]
            found.append(error + (f"; the child {result.describe()}" if error.startswith("no result") else ""))
            continue
        atol, rtol = (C.MODEL_RTOL * float(ref.abs().max()), C.MODEL_RTOL) if model else tol[case["name"]]
        found.append(changed_inputs(case, got.get("inputs_after")) or mismatch(got.get("y"), ref, atol, rtol))
    note = None
    if not result.ok:
        note = f"The child process {result.describe()}. Its output:\n```\n{result.output_tail(3000)}\n```"
    return found, note, result.output


def score_group(test: Test, cases: List[Dict], found: List[Optional[str]], note: Optional[str]) -> None:
    lines = []
    for case, verdict in zip(cases, found):
        mark = "ok" if verdict is None else "FAIL"
        lines.append(f"- {mark}: `{describe_case(case)}`" + ("" if verdict is None else f"\n  {verdict}"))
    passed = sum(v is None for v in found)
    if note and passed < len(cases):
        lines.append("\n" + note)
    test.set(passed, len(cases), "\n".join(lines))


def run(ws: Workspace, report: Report, program: Program, home: Path, seed: int) -> None:
    """The correctness tests, added to `report`."""
    all_public = C.public_cases()
    public = {op: [c for c in all_public if c["op"] == op] for op in ("conv2d", "matmul")}
    hidden = {"conv2d": C.random_conv2d_cases(seed), "matmul": C.random_matmul_cases(seed)}
    models = {"conv2d": C.model_case("resnet", seed + 1), "matmul": C.model_case("gpt2", seed + 2)}
    tests = {
        ("conv2d", "public"): report.add(f"tests.py: {len(public['conv2d'])} conv2d cases", POINTS["public"] / 2),
        ("matmul", "public"): report.add(f"tests.py: {len(public['matmul'])} matmul cases", POINTS["public"] / 2),
        ("conv2d", "hidden"): report.add(f"conv2d on {len(hidden['conv2d'])} new random shapes", "hidden_conv2d"),
        ("matmul", "hidden"): report.add(f"matmul on {len(hidden['matmul'])} new random shapes", "hidden_matmul"),
        ("conv2d", "model"): report.add("ResNet (BasicBlock [1,1,1,1]) with OpenCL conv2d and linear", "resnet"),
        ("matmul", "model"): report.add("GPT-2 (2 layers, 64 wide) with OpenCL linear", "gpt2"),
    }
    report.notes.append(f"Random cases made from seed {seed} for this run.")
    for op in ("matmul", "conv2d"):
        cases = public[op] + hidden[op] + [models[op]]
        tol = {c["name"]: C.HIDDEN_TOL for c in hidden[op]}
        tol.update({c["name"]: C.tolerance(c) for c in public[op]})
        ws.log(f"{op}: {len(cases)} cases")
        found, note, _ = verdicts(ws, program, home, cases, tol)
        p, n = len(public[op]), len(hidden[op])
        score_group(tests[op, "public"], cases[:p], found[:p], note)
        score_group(tests[op, "hidden"], cases[p : p + n], found[p : p + n], note)
        score_group(tests[op, "model"], cases[p + n :], found[p + n :], note)
        ws.log(f"{op}: public {tests[op, 'public'].status}, hidden {tests[op, 'hidden'].score:g}/"
               f"{tests[op, 'hidden'].max_score:g}, {models[op]['op']} {tests[op, 'model'].status}")


def race_check(ws: Workspace, report: Report, program: Program, home: Path) -> None:
    """The race and memory test: the submission under Oclgrind on grading.check's shapes."""
    test = report.add("Races and memory: your conv2d under Oclgrind", "races")
    if not any(t.score > 0 for t in report.find("tests.py: ") if "conv2d" in t.name):
        test.output = "Not run: no conv2d case of tests.py passed."
        return
    todo = check.cases()
    ws.log(f"race and memory check: {len(todo)} cases under Oclgrind")
    log = ws.folder("oclgrind-log-", for_sandbox=True) / check.LOG_NAME
    found, note, output = verdicts(ws, program, home, todo, {c["name"]: C.HIDDEN_TOL for c in todo},
                                   wrapper=check.oclgrind_argv(log), timeout_s=max(ws.opt.timeout_s, 180))
    text = read_log(log, limit=1 << 20) + "\n" + output
    findings = check.parse(text)
    lines = []
    if findings:
        lines.append("Oclgrind found problems (races, out-of-bounds or invalid accesses):\n" + check.describe(findings))
    wrong = [f"- `{describe_case(c)}`: {v}" for c, v in zip(todo, found) if v is not None]
    if wrong:
        lines.append("Results under Oclgrind:\n" + "\n".join(wrong) + (f"\n\n{note}" if note else ""))
    test.set(0 if lines else 1, 1, "\n\n".join(lines) or
             f"No data races, out-of-bounds accesses or invalid accesses on {len(todo)} small cases, and the "
             f"results match torch. Run it yourself with `make check`.")
    ws.log(f"race and memory check: {test.status}")


def read_log(path: Path, limit: int) -> str:
    """A log the sandboxed child wrote: not followed if a link, at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(limit).decode(errors="replace")
