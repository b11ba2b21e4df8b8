"""Grades one submission and writes Gradescope's results.json:

    python -m grading.grade --submission DIR --results FILE

DIR holds the student's opencl-functions.cpp and conv2d.cl. The grading, step by step:
1. build: the two files over a fresh copy of the reference library, compiled in the
   sandbox (grading.build), then the allowed-calls check on the student's object
   (grading.symbols): a forbidden call fails the build with the symbol and the rule named;
2. correctness (grading.correctness): tests.py's cases, new random cases and two small
   models, in sandboxed children, compared here with torch;
3. races and memory: the kernels the student's conv2d launches on small shapes, captured
   on the device and run again under Oclgrind by the grader's own driver (grading.check);
4. performance (grading.performance): every call timed by this process's clock against a
   ladder of staff kernels in the same run, scored by where it lands; the timed layers'
   kernels are run under Oclgrind too.
Every step that runs the student's code is a child process under grading.sandbox: as the
account oclf-sandbox, in namespaces of its own where the machine allows them, contained so
that none of its processes outlives the step, with a timeout, resource limits and capped
output; it talks to the grader over pipes only, and everything it runs or imports is the
grader's and read-only to it. results.json is written whatever happened.

Knobs: flags, or the OCLF_GRADER_* settings for run_autograder (opencl_functions/settings.py lists them;
the older GRADER_* names still work): --timeout seconds per step (default 120),
--build-timeout (300), --perf-runs timed runs per layer (10), --ref-cache the
folder that keeps the reference and ladder builds and a warm kernel cache between runs
(build/grader-cache); OCLF_GRADER_USER the sandbox account, OCLF_GRADER_PYTHON the
children's interpreter, OCLF_GRADER_KEEP=1 keeps the temporary folder.
"""
from __future__ import annotations

import argparse
import secrets
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional

from grading import cases as C
from grading import channel, correctness, performance, sandbox
from grading.build import STUDENT_FILES, Builder, Program
from grading.report import Report
from grading.workspace import Options, Workspace

NOT_BUILT = (("public", "tests.py cases"), ("hidden_conv2d", "conv2d on new random shapes"),
             ("hidden_matmul", "matmul on new random shapes"), ("resnet", "ResNet"), ("gpt2", "GPT-2"),
             ("races", "Races and memory"), ("perf", "Performance"))


def find_submitted(submission: Path) -> Dict[str, Path]:
    """The submitted files: at the top of the folder, or the only ones so named below it
    (an upload of a folder, say). Links are not followed."""
    found = {}
    for name in STUDENT_FILES:
        top = submission / name
        matches = [top] if top.is_file() and not top.is_symlink() else [
            p for p in submission.rglob(name) if p.is_file() and not p.is_symlink()]
        if len(matches) == 1:
            found[name] = matches[0]
    return found


def warm_kernel_cache(ws: Workspace):
    """Fills a new reference build's kernel cache (CLBlast's kernels above all) by running it
    on sample cases, so each grading starts from a copy of a warm cache that no submission
    could have written."""
    def warm(tree: Path, cache: Path) -> None:
        ws.log("warming the kernel cache")
        cache.mkdir(mode=0o700, exist_ok=True)
        sample = C.public_cases() + C.random_matmul_cases(0) + C.random_conv2d_cases(0)
        sample += [C.model_case("resnet", 0), C.model_case("gpt2", 0)]
        child = ws.start_child("grading.child", ["cases"], tree, trusted=True, kernel_cache=cache,
                               timeout_s=ws.opt.build_timeout_s)
        try:
            for case in sample:
                child.send({"case": case})
                child.reader.message(1 << 28, child.deadline())
        except channel.ChannelError as err:
            ws.log(f"warming the kernel cache stopped: {err}")
        child.finish()
    return warm


class Grader:
    def __init__(self, submission: Path, results: Path, options: Options) -> None:
        self.submission, self.results, self.opt = submission, results, options
        self.report = Report()
        self.start = time.monotonic()
        self.ws: Optional[Workspace] = None

    def build(self, builder: Builder, reference: Path) -> Optional[Program]:
        test = self.report.add("Build: compile opencl-functions.cpp and check its calls", 0)
        submitted = find_submitted(self.submission)
        missing = [n for n in STUDENT_FILES if n not in submitted]
        if missing:
            test.output = (f"The submission lacks {', '.join(missing)} (submit both files, named exactly so, "
                           f"once each).")
            return None
        self.ws.log("building the submission")
        program = builder.submission(submitted, reference)
        if not program.built:
            test.output = program.output
        elif program.refusals:
            test.output = ("Your host code calls what the assignment does not allow; the convolution must run "
                           "in your own OpenCL kernel, and your code must not start processes or threads.\n\n" +
                           "\n".join(f"- {r}" for r in program.refusals) +
                           "\n\nRun `make run` (or `python -m grading.symbols`) to see the same check.")
        else:
            test.status = "passed"
            test.output = f"Built in {program.wall_s:.0f} s; every call it makes is allowed."
        self.ws.log(f"build {'ok' if program.ok else 'FAILED'} ({program.wall_s:.0f} s)")
        return program if program.ok else None

    def run(self) -> Dict:
        try:
            self.ws = Workspace(self.opt)
            self.report.notes.append(f"Students' code ran as {self.ws.user.pw_name if self.ws.user else 'the grader'}"
                                     f"; containment: {sandbox.containment()}.")
            builder = Builder(self.ws, warm=warm_kernel_cache(self.ws))
            reference = builder.reference()
            program = self.build(builder, reference)
            if program is None:
                for key, label in NOT_BUILT:
                    self.report.add(label, key).output = "Not run: the submission did not pass the build step."
            else:
                cache = builder.submission_cache(reference)
                correctness.run(self.ws, self.report, program, cache, secrets.randbits(31))
                correctness.race_check(self.ws, self.report, program, cache)
                performance.run(self.ws, self.report, builder, reference, program)
        except Exception:
            test = self.report.add("Grader error", 0)
            test.output = f"The grader failed; ask the course staff.\n```\n{traceback.format_exc()[-4000:]}\n```"
            if self.ws:
                self.ws.log("grader error:\n" + traceback.format_exc())
            else:
                print(traceback.format_exc(), file=sys.stderr)
        finally:
            results = self.report.write(self.results, time.monotonic() - self.start)
            if self.ws and not self.opt.keep:
                shutil.rmtree(self.ws.work, ignore_errors=True)
        if not self.opt.quiet:
            print(self.report.summary(results, self.results))
        return results


def prepare(options: Options) -> Path:
    """Builds the reference and the ladder into the cache and warms its kernel cache
    (Gradescope's setup.sh runs this once)."""
    ws = Workspace(options)
    try:
        return Builder(ws, warm=warm_kernel_cache(ws)).reference()
    finally:
        shutil.rmtree(ws.work, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", type=Path, help="folder with opencl-functions.cpp and conv2d.cl")
    parser.add_argument("--results", type=Path, help="where to write results.json")
    parser.add_argument("--prepare-only", action="store_true",
                        help="only build the reference and the ladder into --ref-cache and warm its kernel cache")
    opt = Options()
    parser.add_argument("--timeout", type=float, default=opt.timeout_s, help="seconds per step")
    parser.add_argument("--build-timeout", type=float, default=opt.build_timeout_s)
    parser.add_argument("--perf-runs", type=int, default=opt.perf_runs, help="timed runs per layer")
    parser.add_argument("--ref-cache", type=Path, default=opt.ref_cache, help="keep the reference build here")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--staff-files", action="store_true",
                        help="build the submission with the reference's staff-only files (to grade the reference "
                             "itself, whose fast paths live in them); students' submissions never get them")
    args = parser.parse_args(argv)
    options = Options(args.timeout, args.build_timeout, args.perf_runs, args.ref_cache, args.quiet,
                      staff_files=args.staff_files)
    if args.prepare_only:
        if not args.ref_cache:
            parser.error("--prepare-only needs --ref-cache")
        print(f"reference and ladder builds ready in {prepare(options).parent}")
        return 0
    if not args.submission or not args.results:
        parser.error("--submission and --results are required")
    results = Grader(args.submission.resolve(), args.results.resolve(), options).run()
    return 2 if any(t["name"] == "Grader error" for t in results["tests"]) else 0


if __name__ == "__main__":
    sys.exit(main())
