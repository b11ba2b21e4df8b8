"""Runs untrusted commands (a student's build, and Python children that load the
student's compiled code) in a child process, never in the grader's own:

- as the dedicated account "oclf-sandbox" when the grader runs as root (OCLF_GRADER_USER
  names another; "nobody" is never used: other services share it);
- contained: in PID and mount namespaces of its own when the kernel allows it
  (util-linux's `unshare`, then grading/jail.py drops to the sandbox user), so every
  process it starts, setsid() or not, dies with the step, its /proc shows the step alone
  and the grader's folders are hidden (View); otherwise every process of the sandbox
  user is killed after the step. Either way the grader checks that the sandbox user owns
  no process before and after each step (`processes_of`), and can stop all of them while
  another program is timed (`Running.pause`);
- with resource limits: processes (against fork bombs), file size, CPU time, address
  space and no core dumps, and a wall-clock timeout; with its stdout and stderr merged and
  capped; with a clean environment (nothing of the grader's leaks in): grading/process.py,
  the runner make check starts its children with too;
- with nothing carried from one step to the next through the machine's shared writable
  folders (SHARED_FOLDERS: /dev/shm, /run/lock): a namespaced step gets an empty tmpfs of
  its own over each (View.private), and whatever the sandbox user left in them is removed
  before and after every step (without namespaces its files there are the only way one step
  could leave something for the next: the race check, say, told from the timed runs).

`start` returns a Running step (the grader's timing protocol talks to it over pipes
passed in `pass_fds`); `run` starts and waits. Steps of the sandbox account run one at a
time on a machine (a lock file), so two gradings at once wait for each other's steps
instead of killing them. The account and that lock: grading/account.py; the runner,
its processes and files: grading/process.py (the names the grader uses are this module's
too).
"""
from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from grading import process
from grading.account import SANDBOX_USER, SandboxError, give_to_sandbox, sandbox_user, take_lock
from grading.library import settings
from grading.process import OUTPUT_KEEP, SHARED_FOLDERS, Limits, Result, Running, processes_of, remove_files_of

__all__ = ["OUTPUT_KEEP", "SANDBOX_USER", "SHARED_FOLDERS", "Limits", "Result", "Running", "SandboxError", "View",
           "containment", "give_to_sandbox", "namespaces", "processes_of", "python_for", "run", "sandbox_user",
           "start"]


@functools.lru_cache(maxsize=None)
def namespaces() -> bool:
    """Whether each step can have PID and mount namespaces of its own (`unshare --pid
    --mount --mount-proc`: root, and a kernel and container that allow it).
    OCLF_GRADER_NAMESPACES=0 turns them off, to try the fallback that Gradescope's
    containers get."""
    if os.geteuid() != 0 or not shutil.which("unshare") or settings.get("GRADER_NAMESPACES") == "0":
        return False
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
                                "--mount-proc", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def containment() -> str:
    """How this machine contains a step, in words (the grader reports it)."""
    if os.geteuid() != 0:
        return "session kill (not root: no account switch, no namespace)"
    if namespaces():
        return ("PID and mount namespaces per step (a /proc of its own, the grader's folders hidden), then a check "
                "that the sandbox user owns no process")
    return ("kill every process of the sandbox user after each step (no namespaces here: the sandbox sees the "
            "grader's processes, whose command lines and files hold nothing it could use)")


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
    if settings.get("GRADER_PYTHON"):
        python = settings.get("GRADER_PYTHON")
    elif user is None or _others_can_run(sys.executable):
        return sys.executable, []
    else:
        python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not _others_can_run(python):
        raise SandboxError(f"the sandbox user cannot run {python} (set OCLF_GRADER_PYTHON)")
    return python, [p for p in site.getsitepackages() if os.path.isdir(p)]




@dataclass
class View:
    """What a sandboxed step sees of the files (with namespaces): each folder of `hide` is
    an empty tmpfs in the step's mount namespace, but for the (path, writable) pairs of
    `keep` under it, bound back (read-only unless writable); each folder of `private` is an
    empty tmpfs of the step's own that it may write (SHARED_FOLDERS)."""

    hide: Sequence[str] = ()
    keep: Sequence[Tuple[str, bool]] = ()
    private: Sequence[str] = ()


JAIL = Path(__file__).resolve().parent / "jail.py"


def _jailed(argv: Sequence[str], cwd: Path, env: Dict[str, str], user: pwd.struct_passwd, view: View) -> List[str]:
    """The command that runs argv as `user` in namespaces of its own: PID (a /proc that
    shows the step alone) and mount (the grader's folders hidden), through grading/jail.py."""
    spec = {"hide": [str(p) for p in view.hide], "keep": [[str(p), w] for p, w in view.keep],
            "private": [str(p) for p in view.private],
            "uid": user.pw_uid, "gid": user.pw_gid, "cwd": str(cwd), "argv": list(argv), "env": env}
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc", "--",
            sys.executable, "-I", "-S", str(JAIL), json.dumps(spec)]


def start(
    argv: Sequence[str],
    cwd: Path,
    env: Dict[str, str],
    limits: Limits,
    user: Optional[pwd.struct_passwd] = None,
    as_sandbox: bool = True,
    pass_fds: Sequence[int] = (),
    view: View = View(),
) -> Running:
    """Starts argv in cwd with exactly `env`, as `user` when as_sandbox (None: the grader's
    own user), under `limits`, contained as containment() says. Never raises for what the
    command does; raises SandboxError when the sandbox user already owns processes."""
    run_as = user if as_sandbox else None
    lock = take_lock(run_as.pw_uid) if run_as is not None else None
    if run_as is not None and processes_of(run_as.pw_uid):
        os.close(lock)
        raise SandboxError(f"the sandbox user {run_as.pw_name} owns processes {processes_of(run_as.pw_uid)}; "
                           f"grading refuses to start while it does")
    if run_as is not None:
        remove_files_of(run_as.pw_uid)  # an earlier grading's, had it stopped before its cleanup
    uid = run_as.pw_uid if run_as else os.getuid()
    nproc = limits.nproc if run_as else process.threads_of(uid) + limits.nproc
    command = list(argv)
    namespaced = namespaces()
    if namespaced and run_as:
        command = _jailed(argv, cwd, env, run_as, view)  # jail.py drops to the user
    elif namespaced:
        command = ["unshare", "--pid", "--fork", "--kill-child", "--"] + command
    return process.start(command, cwd, env, limits, pass_fds, nproc=nproc if as_sandbox else None,
                         user=run_as if run_as and not namespaced else None,
                         owner_uid=run_as.pw_uid if run_as else None, lock=lock)


def run(
    argv: Sequence[str],
    cwd: Path,
    env: Dict[str, str],
    limits: Limits,
    user: Optional[pwd.struct_passwd] = None,
    as_sandbox: bool = True,
    view: View = View(),
) -> Result:
    """Runs argv to its end (or its timeout) as start() does; returns how it ended."""
    return start(argv, cwd, env, limits, user, as_sandbox, view=view).finish()
