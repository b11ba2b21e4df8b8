"""The sandbox account and what it owns on the machine (grading.sandbox runs students' code
as it):

- which account: "oclf-sandbox" when the grader runs as root (OCLF_GRADER_USER names
  another; "nobody" is never used: other services share it), none otherwise;
- its processes, found through /proc (processes_of, and the threads that count against
  RLIMIT_NPROC), and killed until none is left (kill_user: fork bombs respawn);
- its files in the machine's shared writable folders (SHARED_FOLDERS: /dev/shm, /run/lock),
  removed before and after every step (remove_files_of), and the folders handed to it;
- the machine-wide lock its steps take, so two gradings at once wait for each other's steps
  instead of killing them.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional

from grading.library import settings

SANDBOX_USER = "oclf-sandbox"


class SandboxError(RuntimeError):
    """The machine cannot sandbox students' code as required (no account, stray processes)."""


def setting(name: str) -> str:
    """A grader setting's value; "" in a tree whose settings table has no grader settings
    (the handout, where this module serves make check alone)."""
    return settings.get(name) if name in settings.SETTINGS else ""


def sandbox_user() -> Optional[pwd.struct_passwd]:
    """The account children run as, or None when the grader is not root (it cannot switch)."""
    if os.geteuid() != 0:
        return None
    name = setting("GRADER_USER") or SANDBOX_USER
    if name == "nobody":
        raise SandboxError(f"{settings.variable('GRADER_USER')}=nobody: other services share that account; "
                           "use a dedicated one")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(f"no sandbox account {name!r}: create it with `useradd --system --no-create-home "
                           f"--shell /usr/sbin/nologin {name}` (scripts/setup.sh does) or set OCLF_GRADER_USER"
                           ) from None


def give_to_sandbox(path: Path, user: Optional[pwd.struct_passwd]) -> None:
    """Makes `path` (recursively) owned by the sandbox user, so its children may write it."""
    if user is None:
        return
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, user.pw_uid, user.pw_gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


# World-writable folders outside the grader's hidden ones, where one step could leave files
# for a later one (its scratch folder is new each step).
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
    """Kills every process of the sandbox user; raises SandboxError if some survive."""
    left = kill_all(lambda: processes_of(uid))
    if left:
        raise SandboxError(f"processes {left} of uid {uid} survived SIGKILL")


def take_lock(uid: int) -> int:
    """Takes the machine-wide lock of the sandbox account's steps (waits for it); returns
    its file descriptor."""
    fd = os.open(f"/tmp/oclf-sandbox-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
