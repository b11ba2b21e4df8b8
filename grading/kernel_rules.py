"""What the student's kernel source and its build options may hold, so that the race check
(grading.replay, under Oclgrind) builds the same program as the grading device did.

A kernel could tell the two implementations apart by what each one predefines (PoCL
defines __x86_64__, __AVX2__ and POCL_DEVICE_ADDRESS_BITS where Oclgrind defines
__SPIR__ and cl_khr_fp16; __OPENCL_VERSION__ differs), by files it includes, or by
options such as -include, and race only where it is not watched. So conv2d.cl may not:
- include anything (#include, #import, #embed, __has_include);
- name what the implementation defines: identifiers that begin with two underscores or
  an underscore and a capital (but OpenCL C's own: __kernel, __global, __local, ...,
  __attribute__, _Pragma), extension and version macros (cl_khr_*, CL_VERSION_*, ...),
  PoCL's own (POCL_*) and FP_FAST_FMA*;
and its build options may only define macros (-D, with values that obey the same rule),
choose OpenCL C's standard optimisation flags (-cl-*) and turn warnings off (-w).
`python -m grading.symbols` (make run, make check) and the grader's race check apply it.
"""
from __future__ import annotations

import re
import shlex
from typing import List

KEYWORDS = {"__kernel", "__global", "__local", "__constant", "__private", "__generic", "__read_only",
            "__write_only", "__read_write", "__attribute__", "_Pragma"}
IMPLEMENTATION = re.compile(r"\b(__\w+|_[A-Z]\w*|cl_[a-z]+_\w+|CL_\w+|POCL\w*|FP_FAST_FMA\w*)\b")
INCLUDE = re.compile(r"^\s*#\s*(include|include_next|import|embed)\b", re.MULTILINE)
EXTENSION_PRAGMA = re.compile(r"^\s*#\s*pragma\s+OPENCL\s+EXTENSION\b.*$", re.MULTILINE)
CL_FLAGS = {"-cl-mad-enable", "-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations", "-cl-finite-math-only",
            "-cl-no-signed-zeros", "-cl-denorms-are-zero", "-cl-single-precision-constant",
            "-cl-fp32-correctly-rounded-divide-sqrt", "-cl-opt-disable", "-cl-strict-aliasing",
            "-cl-uniform-work-group-size", "-cl-no-subgroup-ifp", "-cl-kernel-arg-info", "-w", "-Werror",
            "-cl-std=CL1.0", "-cl-std=CL1.1", "-cl-std=CL1.2", "-cl-std=CL2.0", "-cl-std=CL3.0"}
DEFINE = re.compile(r"-D([A-Za-z_]\w*)(=(.*))?$")


def _code(source: str) -> str:
    """The source without comments and string literals (their text is not code)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)
    return pattern.sub(lambda m: "\n" * m.group(0).count("\n") if m.group(0).startswith("/") else '""', source)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def source_problems(source: str, name: str = "conv2d.cl") -> List[str]:
    """What the kernel source holds that the rules above refuse, one line each."""
    code = EXTENSION_PRAGMA.sub("", _code(source))
    problems = [f"{name}:{_line_of(code, m.start())}: `#{m.group(1)}`: a kernel may not include files (the race "
                f"check must build the same program as the device)" for m in INCLUDE.finditer(code)]
    seen = set()
    for m in IMPLEMENTATION.finditer(code):
        word = m.group(1)
        if word in KEYWORDS or word in seen:
            continue
        seen.add(word)
        problems.append(f"{name}:{_line_of(code, m.start())}: `{word}` names what the OpenCL implementation "
                        f"defines; a kernel may not test or use it (it differs between the grading device and the "
                        f"race check's Oclgrind)")
    return problems


def option_problems(options: str) -> List[str]:
    """What build options hold that the rules above refuse, one line each."""
    try:
        words = shlex.split(options)
    except ValueError as err:
        return [f"build options {options!r} do not parse ({err})"]
    problems, i = [], 0
    while i < len(words):
        word = words[i]
        if word == "-D" and i + 1 < len(words):
            word = "-D" + words[i + 1]
            i += 1
        define = DEFINE.match(word)
        if define:
            value = define.group(3) or ""
            if IMPLEMENTATION.search(define.group(1)) or any(w not in KEYWORDS for w in IMPLEMENTATION.findall(value)):
                problems.append(f"build option `{word}` names what the OpenCL implementation defines")
        elif word not in CL_FLAGS:
            problems.append(f"build option `{word}` is not allowed: only -D macros, OpenCL C's -cl-* flags and -w")
        i += 1
    return problems
