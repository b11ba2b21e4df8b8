"""The allowed-calls check on the student's host code: every symbol that the object of
opencl-functions.cpp leaves undefined (`nm -u`) must be on an allowlist, so the
convolution runs in the student's own OpenCL code and nothing escapes the grader's step.

    python -m grading.symbols [OBJECT]     (make run and make check run it; so does the grader)

Allowed: the OpenCL API, CLBlast's GEMM and GEMV, the course runtime (RUNTIME_API: the
classes and functions of runtime/runtime.hpp), and the C and C++ standard libraries'
strings, containers, memory, math, exceptions, printing, file reading, getenv and clocks
(students print and time their code while they optimise it). Anything else fails, with the symbol and the rule named:
Python's C API and pybind11 (torch from the host), loading code at run time, processes,
threads, the network, signals and other system calls, CLBlast's other routines (Convgemm
would do the convolution), the library's functions outside the runtime, and the OpenCL
calls that build, set up or launch kernels (the runtime's rt.kernel, set_args and
rt.launch do that, and record it for the race check). The object may not include the ICD
loader's dispatch table (CL/cl_icd.h), which would reach the driver around both.

It also applies grading.kernel_rules to conv2d.cl (what the race check needs of a kernel).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

# The course runtime (opencl_functions/runtime/): its classes and functions, in namespace oclf.
RUNTIME_API = (r"oclf::(Runtime|Buffer|BufferPool|Device|DeviceInfo|Programs|Profiler|ResidentStore|Tuning|Error|"
               r"BuildError)\b|"
               r"oclf::(set_arg|check|check_clblast|status_name|clblast_status_name|describe_failure|setting|"
               r"setting_variable|list_devices)(\[abi:\w+\])?\(")
ROOT = Path(__file__).resolve().parent.parent

# (pattern on the demangled name, reason) for what is refused; checked before the allowlist.
REFUSED = [
    (r"^_?Py|pybind11::|^torch::|^at::|^c10::",
     "calls into Python or torch: the convolution must run in your own OpenCL code"),
    (r"^(dlopen|dlmopen|dlsym|dlvsym|dlclose|dlerror|dlinfo)$", "loads code at run time"),
    (r"^(fork|vfork|_Fork|clone|clone3|execve|execv|execvp|execvpe|execl|execlp|execle|fexecve|system|popen|"
     r"posix_spawnp?|daemon|setsid|setpgid|setpgrp|wait|waitpid|wait4)$",
     "starts, waits for or detaches processes"),
    (r"^pthread_|^thrd_|std::thread|std::jthread|std::async|std::__future_base",
     "starts threads (the grader times each call of your code from outside it)"),
    (r"^(socket|socketpair|connect|bind|listen|accept|accept4|send|sendto|sendmsg|recv|recvfrom|recvmsg|"
     r"getaddrinfo|gethostbyname|shutdown)$", "uses the network"),
    (r"^(kill|tgkill|raise|ptrace|prctl|syscall|setuid|setgid|setreuid|setregid|setresuid|setresgid|seteuid|"
     r"setegid|chroot|unshare|setns|mount|signal|sigaction|alarm|setitimer|timer_create|mprotect|"
     r"process_vm_writev|process_vm_readv)$",
     "touches processes, signals or memory protection"),
    (r"^(clCreateProgramWith\w+|clBuildProgram|clCompileProgram|clLinkProgram|clCreateKernel|"
     r"clCreateKernelsInProgram|clCloneKernel|clSetKernelArg\w*|clSetKernelExecInfo|clEnqueueNDRangeKernel|"
     r"clEnqueueTask|clEnqueueNativeKernel|clGetExtensionFunctionAddress\w*|clSetProgram\w+)$",
     "builds, sets up or launches kernels around the course runtime: use rt.kernel, set_args and rt.launch, "
     "which the grader watches (its race check runs every launch again under Oclgrind)"),
    (r"^clblast::StatusCode clblast::(?!(Gemm|Gemv)<float>\()|^clblast::(?!StatusCode )",
     "calls a CLBlast routine other than GEMM and GEMV (Convgemm or Im2col would do the convolution for you)"),
    (rf"^(typeinfo for |typeinfo name for |vtable for )?(?!({RUNTIME_API}))oclf::",
     "calls a library function outside the course runtime (only runtime/runtime.hpp is yours to use)"),
]

_C_LIBRARY = (
    # memory and strings
    "memcpy memmove memset memcmp memchr strlen strnlen strcmp strncmp strcpy strncpy strcat strncat strchr "
    "strrchr strstr strdup strndup strtok strtok_r strerror strspn strcspn toupper tolower isspace isdigit isalpha "
    "malloc calloc realloc free posix_memalign aligned_alloc abort exit atexit qsort bsearch "
    "strtol strtoll strtoul strtoull strtod strtof atoi atol atoll atof "
    # printing and files
    "printf fprintf sprintf snprintf vprintf vfprintf vsprintf vsnprintf puts fputs putchar fputc putc fwrite "
    "fflush perror stdout stderr stdin sscanf fopen fclose fread fseek ftell rewind fgets fgetc getc feof ferror "
    "getenv "
    # clocks
    "time clock clock_gettime gettimeofday "
    # math
    "sqrt sqrtf cbrt cbrtf exp expf exp2 exp2f log logf log2 log2f log10 log10f pow powf fabs fabsf floor floorf "
    "ceil ceilf round roundf trunc truncf fmod fmodf fmin fminf fmax fmaxf lround lroundf llround llroundf "
    "sin sinf cos cosf tan tanf tanh tanhf erf erff hypot hypotf ldexp frexp"
).split()
ALLOWED = [
    r"^cl[A-Z]\w*$",  # the OpenCL API
    r"^clblast::StatusCode clblast::(Gemm|Gemv)<float>\(",
    rf"^(typeinfo for |typeinfo name for |vtable for |VTT for )?({RUNTIME_API})",
    # the C++ standard library and its support
    r"^(typeinfo for |typeinfo name for |vtable for |VTT for |construction vtable for .* in )?"
    r"(std::|__gnu_cxx::|__cxxabiv1::)",
    r"^typeinfo for (char|int|unsigned|long|float|double|bool|void|short)",
    r"^operator (new|delete)",
    r"^(__cxa_\w+|__gxx_personality_v0|_Unwind_\w+|__dynamic_cast|__stack_chk_fail|_GLOBAL_OFFSET_TABLE_|"
    r"__dso_handle|__tls_get_addr|__assert_fail|__errno_location|__ctype_b_loc|__ctype_toupper_loc|"
    r"__ctype_tolower_loc|__libc_single_threaded)$",
    # the C library, also as glibc's checked (_chk) and versioned (__isoc99_, __isoc23_) names
    rf"^(__isoc99_|__isoc23_|__)?({'|'.join(_C_LIBRARY)})(_chk)?$",
]
UNLISTED = ("is not on the list of allowed calls: the OpenCL API, CLBlast's GEMM and GEMV, the course runtime "
            "(runtime/runtime.hpp), and the C/C++ standard library's strings, containers, memory, math, "
            "exceptions, printing, files, getenv and clocks")


@dataclass
class Refusal:
    symbol: str
    reason: str
    verb: str = "calls"

    def __str__(self) -> str:
        return f"opencl-functions.cpp {self.verb} `{self.symbol}`, which {self.reason}."


def undefined_symbols(obj: Path) -> List[str]:
    """The demangled names `nm -u` lists for an object file."""
    out = subprocess.run(["nm", "-u", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    return [line.split(None, 1)[-1].strip() for line in out.splitlines() if line.strip()]


def judge(symbol: str) -> Optional[str]:
    """None when `symbol` is allowed, else the reason it is not."""
    for pattern, reason in REFUSED:
        if re.search(pattern, symbol):
            return reason
    if any(re.search(pattern, symbol) for pattern in ALLOWED):
        return None
    return UNLISTED


def check(symbols: Sequence[str]) -> List[Refusal]:
    """Every refused symbol, with its reason."""
    return [Refusal(s, reason) for s in symbols if (reason := judge(s)) is not None]


def check_object(obj: Path) -> List[Refusal]:
    return check(undefined_symbols(obj))


# Headers a student's translation unit may not include, and why.
REFUSED_HEADERS = [(re.compile(r"(^|/)CL/cl_icd\.h$"),
                    "is the ICD loader's dispatch table, a way to call the driver around the allowed calls")]


def header_refusals(depfile: Path) -> List[Refusal]:
    """What the compiler's dependency list (-MD) shows that REFUSED_HEADERS refuses."""
    try:
        text = depfile.read_text(errors="replace").replace("\\\n", " ")
    except OSError:
        return []
    headers = text.split(":", 1)[-1].split()
    return [Refusal(h, reason, "includes") for h in headers for pattern, reason in REFUSED_HEADERS
            if pattern.search(h)]


def find_object(root: Path = ROOT) -> Optional[Path]:
    """The newest object of opencl-functions.cpp under root/build (setup.py's build folder)."""
    found = sorted((root / "build").rglob("opencl-functions.o"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object", nargs="?", type=Path, help="default: the newest build/**/opencl-functions.o")
    args = parser.parse_args(argv)
    obj = args.object or find_object()
    if obj is None or not obj.is_file():
        print("symbols: no object of opencl-functions.cpp found; run make build first", file=sys.stderr)
        return 2
    from grading import kernel_rules

    refusals = check_object(obj)
    for refusal in refusals:
        print(f"not allowed: {refusal}", file=sys.stderr)
    kernel = root_kernel()
    problems = kernel_rules.source_problems(kernel.read_text(errors="replace")) if kernel.is_file() else []
    for problem in problems:
        print(f"not allowed: {problem}", file=sys.stderr)
    return 1 if refusals or problems else 0


def root_kernel() -> Path:
    """The student's kernel of this tree (OCLF_KERNEL_DIR's when set, as the runtime reads it)."""
    from grading.library import settings

    return Path(settings.get("KERNEL_DIR") or ROOT / "opencl_functions") / "conv2d.cl"


if __name__ == "__main__":
    sys.exit(main())
