"""Runs a command in a child process and waits for it within limits: the runner that make
check starts its children with (the grader starts students' code through it too).

- resource limits: file size, CPU time, address space, no core dumps, optionally the
  number of processes, and a wall-clock timeout;
- its stdout and stderr merged and capped: the first OUTPUT_KEEP bytes are kept, the rest
  counted and dropped;
- exactly the environment it is given;
- in a session of its own, whose every process dies with the step (what the command
  started with setsid() too when the step runs as a user of its own: then every process of
  that user is the step's, and so are that user's files in the machine's shared writable
  folders, SHARED_FOLDERS, removed when the step ends).

`start` returns a Running step (a caller's pipes to it are passed in `pass_fds`); `run`
starts and waits.
"""
from __future__ import annotations

import os
import pwd
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

OUTPUT_KEEP = 64 * 1024


@dataclass
class Limits:
    """Per-step resource limits. Address space is generous: torch and the OpenCL
    compiler map a lot of virtual memory without using it."""

    timeout_s: float = 120.0
    nproc: int = 64  # processes and threads of the step's user (PoCL and torch start a few threads)
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


class ProcessError(RuntimeError):
    """Processes of a step survived SIGKILL."""


# World-writable folders where one step of a user could leave files for a later one (the
# grader hides its own folders from a step, and gives it a new scratch folder each time).
SHARED_FOLDERS = ("/dev/shm", "/run/lock")


def remove_files_of(uid: int) -> None:
    """Removes what `uid` owns at the top of SHARED_FOLDERS (its processes are gone: nothing
    can swap a path meanwhile); links are removed, never followed."""
    for folder in SHARED_FOLDERS:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue


def _processes(where) -> List[int]:
    """The pids of /proc for which where(pid) is true; processes that end meanwhile are skipped."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if where(pid):
                pids.append(int(pid))
        except (OSError, IndexError, KeyError, ValueError):
            continue
    return pids


def _status(pid: str) -> Dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def _session(pid: str) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat.rsplit(")", 1)[1].split()[3])  # after the command name: state ppid pgrp session ...


def processes_of(uid: int) -> List[int]:
    """Processes whose real or effective uid is `uid`."""
    return _processes(lambda pid: str(uid) in _status(pid)["Uid"].split()[:2])


def threads_of(uid: int) -> int:
    """Threads now running under uid: the base for RLIMIT_NPROC when the user cannot change."""
    count = 0
    for pid in processes_of(uid):
        try:
            count += int(_status(str(pid))["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def session_members(sid: int) -> List[int]:
    """Processes in session sid: the child and everything it started that stayed in it."""
    return _processes(lambda pid: _session(pid) == sid)


def kill_all(find) -> List[int]:
    """SIGKILLs what find() lists until it lists nothing (fork bombs respawn); returns what
    is left after 50 rounds (empty when all died)."""
    for _ in range(50):
        members = find()
        if not members:
            return []
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return find()


def kill_user(uid: int) -> None:
    """Kills every process of uid; raises ProcessError if some survive."""
    left = kill_all(lambda: processes_of(uid))
    if left:
        raise ProcessError(f"processes {left} of uid {uid} survived SIGKILL")


class Running:
    """A started step: wait for it with finish(); kill() stops it early. `uid`: the user
    all of whose processes are the step's (None: its session); `lock`: a file descriptor
    closed when it ends."""

    def __init__(self, proc: subprocess.Popen, limits: Limits, uid: Optional[int], lock: Optional[int]) -> None:
        self.proc, self.limits, self.uid, self.lock = proc, limits, uid, lock
        self.start = time.monotonic()
        self.kept = bytearray()
        self.total = 0
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while True:
            chunk = self.proc.stdout.read1(1 << 16)
            if not chunk:
                return
            self.total += len(chunk)
            room = OUTPUT_KEEP - len(self.kept)
            if room > 0:
                self.kept.extend(chunk[:room])

    def remaining_s(self) -> float:
        return max(0.0, self.limits.timeout_s - (time.monotonic() - self.start))

    def kill(self) -> None:
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def _signal_all(self, sig: int) -> None:
        """Signals every process of the step: all of its owner's (what it started in any
        way included), or the step's process group when it has no user of its own."""
        if self.uid is not None:
            for pid in processes_of(self.uid):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        else:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def pause(self) -> None:
        """Stops every process of the step (SIGSTOP: no process can catch or ignore it), so
        nothing of it runs while another program is timed."""
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)

    def finish(self) -> Result:
        """Waits for the step up to its timeout, then stops it and everything it started."""
        timed_out = False
        self.resume()  # a paused step must be able to end
        try:
            self.proc.wait(timeout=self.remaining_s())
        except subprocess.TimeoutExpired:
            timed_out = True
        kill_all(lambda: session_members(self.proc.pid))  # the namespace's init and helpers
        self.proc.wait()
        try:
            if self.uid is not None:
                kill_user(self.uid)
                remove_files_of(self.uid)
        finally:
            if self.lock is not None:
                os.close(self.lock)  # releases the lock
        self.reader.join(timeout=5)
        self.proc.stdout.close()
        return Result(
            returncode=None if timed_out else self.proc.returncode,
            output=self.kept.decode(errors="replace"),
            output_bytes=self.total,
            timed_out=timed_out,
            wall_s=time.monotonic() - self.start,
        )



def start(
    argv: Sequence[str],
    cwd: Path,
    env: Dict[str, str],
    limits: Limits,
    pass_fds: Sequence[int] = (),
    nproc: Optional[int] = None,
    user: Optional[pwd.struct_passwd] = None,
    owner_uid: Optional[int] = None,
    lock: Optional[int] = None,
) -> Running:
    """Starts argv in cwd with exactly `env`, under `limits`, in a session of its own.
    `nproc`: the RLIMIT_NPROC of the child (None: none); `user`: the account the child
    switches to before it runs argv (None: it stays this process's user); `owner_uid`: a
    user all of whose processes and shared files are the step's (None: the step is its
    session); `lock`: a file descriptor held while the step runs, closed when it ends.
    Never raises for what the command does."""
    cpu = limits.cpu_s or int(2 * limits.timeout_s) + 5

    def preexec() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if user is not None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        os.umask(0o077)

    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, preexec_fn=preexec, close_fds=True, pass_fds=tuple(pass_fds),
        )
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    return Running(proc, limits, owner_uid, lock)


def run(argv: Sequence[str], cwd: Path, env: Dict[str, str], limits: Limits) -> Result:
    """Runs argv to its end (or its timeout) as this process's user; returns how it ended."""
    return start(argv, cwd, env, limits).finish()
