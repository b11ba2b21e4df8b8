"""The first process of a sandboxed step, run as root inside the step's own PID and mount
namespaces (grading.sandbox starts it under `unshare --pid --mount --mount-proc`): it
hides the grader's files from the step's view of the machine, drops to the sandbox
account for good, and becomes the step's command.

    python -I -S grading/jail.py SPEC_JSON

SPEC_JSON: {"hide": [folders], "keep": [[path, writable], ...], "private": [folders],
"uid": N, "gid": N, "cwd": path, "argv": [...], "env": {...}}. Each hidden folder gets an
empty tmpfs over it in this namespace only; the kept paths under it are bound back,
read-only unless marked writable (the interpreter's virtual environment inside a checkout,
the step's scratch). Each private folder (/dev/shm, /run/lock) gets an empty tmpfs that
everyone may write, as on the machine (Python's multiprocessing needs /dev/shm), small and
the step's own. Nothing of this reaches the rest of the machine, and the namespace ends with
the step.

Standard library only, and no site packages (-S): it runs before the step's own code and
must not import anything the step could have written.
"""
import ctypes
import json
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None):
    args = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _make_passable(top, path):
    """The folders from `top` down to `path`, made in the tmpfs where missing: mode 0711
    (others may pass through to what is bound below, not list), whatever the umask."""
    current = top
    for part in os.path.relpath(path, top).split(os.sep):
        if part in ("", "."):
            continue
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current)
            os.chmod(current, 0o711)


def hide(folder, keep):
    """An empty tmpfs over `folder`, with the (path, writable) pairs of `keep` (under it)
    bound back."""
    handles = []
    for path, writable in keep:
        handles.append((path, writable, os.open(path, os.O_PATH | os.O_CLOEXEC), os.path.isdir(path)))
    _mount("oclf-hidden", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path, writable, fd, is_dir in handles:
        _make_passable(folder, path if is_dir else os.path.dirname(path))
        if not is_dir:
            open(path, "a").close()
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if writable else MS_RDONLY))
        os.close(fd)


def resolve(program, path):
    """The program's file on `path` (resolved before dropping privileges: the interpreter's
    own modules may then be out of reach)."""
    if "/" in program:
        return program
    for folder in path.split(":"):
        candidate = os.path.join(folder, program)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"{program} is not on PATH {path}")


def main():
    spec = json.loads(sys.argv[1])
    argv = spec["argv"]
    program = resolve(argv[0], spec["env"].get("PATH", "/usr/bin:/bin"))
    for folder in spec.get("private", []):
        if os.path.isdir(folder):
            _mount("oclf-private", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for folder in spec["hide"]:
        if os.path.isdir(folder):
            under = folder.rstrip("/") + "/"
            keep = [(p, w) for p, w in spec["keep"] if os.path.exists(p) and (p + "/").startswith(under)]
            hide(folder, keep)
    os.chdir(spec["cwd"])  # before dropping: the step keeps its folder even where it could not enter it
    os.setgroups([])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.execve(program, argv, spec["env"])


if __name__ == "__main__":
    main()
