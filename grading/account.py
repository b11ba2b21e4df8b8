"""The sandbox account that grading.sandbox runs students' code as: "oclf-sandbox" when the
grader runs as root (OCLF_GRADER_USER names another; "nobody" is never used: other services
share it), none otherwise; the folders handed to it; and the machine-wide lock its steps
take, so two gradings at once wait for each other's steps instead of killing them. Its
processes and its files in the shared writable folders are grading.process's to find and
remove.
"""
from __future__ import annotations

import fcntl
import os
import pwd
from pathlib import Path
from typing import Optional

from grading.library import settings
from grading.process import ProcessError

SANDBOX_USER = "oclf-sandbox"


class SandboxError(ProcessError):
    """The machine cannot sandbox students' code as required (no account, stray processes)."""


def sandbox_user() -> Optional[pwd.struct_passwd]:
    """The account children run as, or None when the grader is not root (it cannot switch)."""
    if os.geteuid() != 0:
        return None
    name = settings.get("GRADER_USER") or SANDBOX_USER
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


def take_lock(uid: int) -> int:
    """Takes the machine-wide lock of the sandbox account's steps (waits for it); returns
    its file descriptor."""
    fd = os.open(f"/tmp/oclf-sandbox-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd
