"""The correctness step: tests.py's public cases, hidden random cases and two small models,
run in sandboxed children (one for matmul then GPT-2, one for conv2d then the ResNet, so a
conv2d that crashes or hangs costs the conv2d tests only), each output read back with size
limits and compared with torch's answer, computed here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple


from grading import cases as C
from grading import channel, check
from grading.build import Program
from grading.compare import changed_inputs, tensor_bytes
from grading.oracle import mismatch
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


def verdicts(ws: Workspace, program: Program, cache: Path, cases: List[Dict], tol: Dict[str, Tuple[float, float]],
             ) -> Tuple[List[Optional[str]], Optional[str]]:
    """Runs cases in one child of `program`, one at a time over its pipes. Returns per case
    None (pass) or what failed, and a note on the child when it did not end well."""
    child = ws.start_child("grading.child", ["cases"], program.tree, trusted=False, kernel_cache=cache)
    found: List[Optional[str]] = []
    stopped = None
    for case in cases:
        model = case["op"] in ("resnet", "gpt2")
        ref = C.model_reference(case) if model else C.reference(case)
        try:
            child.send({"case": case})
            got = child.reader.message(2 * tensor_bytes(case) + 2 * tensor_bytes(ref) + (1 << 16), child.deadline())
        except channel.ChannelError as err:
            stopped = str(err)
            break
        if "error" in got:
            found.append(str(got["error"])[:3000])
            continue
        atol, rtol = (C.MODEL_RTOL * float(ref.abs().max()), C.MODEL_RTOL) if model else tol[case["name"]]
        found.append(changed_inputs(case, got.get("inputs_after")) or mismatch(got.get("y"), ref, atol, rtol))
    result = child.finish()
    missing = len(cases) - len(found)
    found += [f"no result: the child {result.describe()}"] * missing
    note = None
    if not result.ok or stopped:
        note = f"The child process {result.describe()}. Its output:\n```\n{result.output_tail(3000)}\n```"
    return found, note


def score_group(test: Test, cases: List[Dict], found: List[Optional[str]], note: Optional[str]) -> None:
    lines = []
    for case, verdict in zip(cases, found):
        mark = "ok" if verdict is None else "FAIL"
        lines.append(f"- {mark}: `{describe_case(case)}`" + ("" if verdict is None else f"\n  {verdict}"))
    passed = sum(v is None for v in found)
    if note and passed < len(cases):
        lines.append("\n" + note)
    test.set(passed, len(cases), "\n".join(lines))


def run(ws: Workspace, report: Report, program: Program, cache: Path, seed: int) -> None:
    """The correctness tests, added to `report`."""
    all_public = C.public_cases()
    public = {op: [c for c in all_public if c["op"] == op] for op in ("conv2d", "matmul")}
    hidden = {"conv2d": C.random_conv2d_cases(seed), "matmul": C.random_matmul_cases(seed)}
    models = {"conv2d": C.model_case("resnet", seed + 1), "matmul": C.model_case("gpt2", seed + 2)}
    tests = {
        ("conv2d", "public"): report.add(f"tests.py: conv2d cases ({len(public['conv2d'])})", POINTS["public"] / 2),
        ("matmul", "public"): report.add(f"tests.py: matmul cases ({len(public['matmul'])})", POINTS["public"] / 2),
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
        found, note = verdicts(ws, program, cache, cases, tol)
        p, n = len(public[op]), len(hidden[op])
        score_group(tests[op, "public"], cases[:p], found[:p], note)
        score_group(tests[op, "hidden"], cases[p : p + n], found[p : p + n], note)
        score_group(tests[op, "model"], cases[p + n :], found[p + n :], note)
        ws.log(f"{op}: public {tests[op, 'public'].status}, hidden {tests[op, 'hidden'].score:g}/"
               f"{tests[op, 'hidden'].max_score:g}, {models[op]['op']} {tests[op, 'model'].status}")


def race_check(ws: Workspace, report: Report, program: Program, cache: Path) -> None:
    """The race and memory test: the submission's launches on grading.check's small shapes,
    captured on the device and run again in full under Oclgrind by the grader's driver."""
    test = report.add("Races and memory: your conv2d's kernels under Oclgrind", "races")
    if not any(t.score > 0 for t in report.find("tests.py: ") if "conv2d" in t.name):
        test.output = "Not run: no conv2d case of tests.py passed."
        return
    todo = check.cases()
    ws.log(f"race and memory check: {len(todo)} cases captured, then run under Oclgrind")
    start = ws.starter(program.tree, cache)
    results, note = check.capture(start, todo, ws.opt.timeout_s)
    wrong = []
    for case, got in zip(todo, results):
        problem = got.get("error") or mismatch(got.get("y"), C.reference(case), *C.HIDDEN_TOL)
        if problem:
            wrong.append(f"- `{describe_case(case)}`: {str(problem)[:2000]}")
    launches = check.labelled(results, [c["name"] for c in todo])
    problems, findings = check.replay(start, launches, quick=False, timeout_s=max(ws.opt.timeout_s, 180))
    lines = race_report(findings, problems)
    if wrong:
        lines.append("Results:\n" + "\n".join(wrong) + (f"\n\n{note}" if note else ""))
    test.set(0 if lines else 1, 1, "\n\n".join(lines) or
             f"No data races, out-of-bounds accesses or invalid accesses in the {len(launches)} launches of "
             f"{len(todo)} small cases, every work-group run under Oclgrind, and the results match torch. Run it "
             f"yourself with `make check`.")
    ws.log(f"race and memory check: {test.status}")


def race_report(findings: List[check.Finding], problems: List[str]) -> List[str]:
    """The race check's findings as report paragraphs."""
    lines = []
    if findings:
        lines.append("Oclgrind found problems (races, out-of-bounds or invalid accesses):\n" + check.describe(findings))
    if problems:
        lines.append("Your kernels could not be checked as they ran:\n" + "\n".join(f"- {p}" for p in problems[:12]))
    return lines
