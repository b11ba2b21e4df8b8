"""Runs untrusted commands (a student's build, and Python children that load the
student's compiled code) in a child process, never in the grader's own:

- as an unprivileged user when the grader runs as root (GRADER_USER, default
  "oclf-sandbox" when that user exists, else "nobody");
- in a session of its own, whose every process is killed when the step ends or its
  wall-clock timeout passes;
- with resource limits: processes (against fork bombs), file size, CPU time, address
  space and no core dumps;
- with its stdout and stderr merged and capped: the first OUTPUT_KEEP bytes are kept,
  the rest counted and dropped;
- with a clean environment (nothing of the grader's leaks in).
"""
from __future__ import annotations

import os
import pwd
import resource
import signal
import site
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

OUTPUT_KEEP = 64 * 1024
DEFAULT_USER_CANDIDATES = ("oclf-sandbox", "nobody")


@dataclass
class Limits:
    """Per-step resource limits. Address space is generous: torch and the OpenCL
    compiler map a lot of virtual memory without using it."""

    timeout_s: float = 120.0
    nproc: int = 64  # processes and threads of the sandbox user (PoCL and torch start a few threads)
    fsize_bytes: int = 256 * 1024 * 1024
    address_space_bytes: int = 16 * 1024**3
    cpu_s: Optional[int] = None  # default: 2 × timeout (the wall clock stops it first)


@dataclass
class Result:
    returncode: Optional[int]  # None when killed for the timeout
    output: str  # merged stdout and stderr, the first OUTPUT_KEEP bytes
    output_bytes: int  # how many bytes it printed in all
    timed_out: bool
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """How the command ended, in words."""
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s and was stopped"
        if self.returncode is not None and self.returncode < 0:
            sig = -self.returncode
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return f"crashed with signal {name}"
        if self.returncode:
            return f"exited with status {self.returncode}"
        return "finished"

    def output_tail(self, limit: int = 4000) -> str:
        text = self.output if len(self.output) <= limit else "…\n" + self.output[-limit:]
        if self.output_bytes > len(self.output.encode(errors="replace")):
            text += f"\n[{self.output_bytes} bytes of output in all; the rest was dropped]"
        return text


def sandbox_user() -> Optional[pwd.struct_passwd]:
    """The account children run as, or None when the grader is not root (it cannot switch)."""
    if os.geteuid() != 0:
        return None
    names = [os.environ["GRADER_USER"]] if os.environ.get("GRADER_USER") else list(DEFAULT_USER_CANDIDATES)
    for name in names:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError(f"no sandbox user: none of {names} exists (set GRADER_USER)")


def _others_can_run(path: str) -> bool:
    """Whether any user may execute `path`: every folder on its real path and the file
    itself have the others' execute bit."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(1, len(parts)):
        target = "/".join(parts[: i + 1]) or "/"
        try:
            if not os.stat(target).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def python_for(user: Optional[pwd.struct_passwd]) -> Tuple[str, List[str]]:
    """The interpreter children run, and folders to add to their PYTHONPATH.

    The grader's own interpreter when the sandbox user may run it; else GRADER_PYTHON or the
    system's python3.X of the same version, given this environment's site-packages
    (a virtualenv made from an interpreter under /root, say, is out of other users' reach)."""
    if os.environ.get("GRADER_PYTHON"):
        python = os.environ["GRADER_PYTHON"]
    elif user is None or _others_can_run(sys.executable):
        return sys.executable, []
    else:
        python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not _others_can_run(python):
        raise RuntimeError(f"the sandbox user cannot run {python} (set GRADER_PYTHON)")
    return python, [p for p in site.getsitepackages() if os.path.isdir(p)]


def give_to_sandbox(path: Path, user: Optional[pwd.struct_passwd]) -> None:
    """Makes `path` (recursively) owned by the sandbox user, so its children may write it."""
    if user is None:
        return
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, user.pw_uid, user.pw_gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


def _threads_of(uid: int) -> int:
    """Threads now running under uid: the base for RLIMIT_NPROC when the user cannot change."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def _session_members(sid: int) -> List[int]:
    """Processes in session sid: the child and everything it started that stayed in it."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            # Fields after the ")" closing the command name: state ppid pgrp session ...
            if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
                pids.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def _kill_session(sid: int) -> None:
    """SIGKILLs every process of the session until none is left (fork bombs respawn)."""
    for _ in range(50):
        members = _session_members(sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def run(
    argv: Sequence[str],
    cwd: Path,
    env: Dict[str, str],
    limits: Limits,
    user: Optional[pwd.struct_passwd] = None,
    as_sandbox: bool = True,
) -> Result:
    """Runs argv in cwd with exactly `env`, as `user` (None: the grader's own user),
    under `limits`. Always returns; never raises for what the command did."""
    run_as = user if as_sandbox else None
    uid = run_as.pw_uid if run_as else os.getuid()
    nproc = limits.nproc if run_as else _threads_of(uid) + limits.nproc
    cpu = limits.cpu_s or int(2 * limits.timeout_s) + 5

    def preexec() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        if as_sandbox:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if run_as:
            os.setgroups([])
            os.setgid(run_as.pw_gid)
            os.setuid(run_as.pw_uid)
        os.umask(0o077)

    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, preexec_fn=preexec, close_fds=True,
    )
    kept = bytearray()
    total = [0]

    def drain() -> None:
        while True:
            chunk = proc.stdout.read1(1 << 16)
            if not chunk:
                return
            total[0] += len(chunk)
            room = OUTPUT_KEEP - len(kept)
            if room > 0:
                kept.extend(chunk[:room])

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_session(proc.pid)
    proc.wait()
    reader.join(timeout=5)
    proc.stdout.close()
    return Result(
        returncode=None if timed_out else proc.returncode,
        output=kept.decode(errors="replace"),
        output_bytes=total[0],
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
    )
