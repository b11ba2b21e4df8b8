"""The pipes between the grader and its children, the only way inputs and results travel:
nothing a child reads is in a file, and nothing the grader trusts comes from one.

A message is a frame: 8 bytes of length (little-endian), then that many bytes: either a
`torch.save`d dict (read back weights-only, so loading it runs no code) or raw bytes
(a timed output). One-byte signals ("r", "g", "d", "e") sequence the timed calls.

The reading side is the grader's: it gives every read a deadline and a size limit, and a
child that sends too much, too little or too late gets a ChannelError, never a hang.
`spawn` starts a child with its two pipes; `Child` is the grader's handle on it.
"""
from __future__ import annotations

import io
import os
import select
import shutil
import struct
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

HEADER = struct.Struct("<Q")
PIPE_BYTES = 1 << 20  # room for a timed output in one write (Linux's default cap for pipes)


class ChannelError(RuntimeError):
    """A child broke the protocol: too much, too little, too late, or unreadable."""


def widen(fd: int) -> None:
    """Gives a pipe PIPE_BYTES of buffer where the system allows it (a timed output then
    fits in one write); keeps the default elsewhere."""
    try:
        import fcntl

        fcntl.fcntl(fd, 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except OSError:
        pass


def write_all(fd: int, data: bytes, deadline: Optional[float] = None) -> None:
    """Writes all of data; with a deadline (the grader's side, on a non-blocking pipe), a
    child that stops reading gets a ChannelError instead of a grader that waits forever."""
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise ChannelError("the child stopped reading its input")
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        except BrokenPipeError:
            raise ChannelError("the child closed its input") from None
        view = view[written:]


def as_bytes(value) -> bytes:
    """Bytes that travelled as a uint8 tensor (a weights-only load refuses bytes objects)."""
    return value.numpy().tobytes() if isinstance(value, torch.Tensor) else bytes(value)


def encode(message: Dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def send(fd: int, message: Dict, deadline: Optional[float] = None) -> None:
    payload = encode(message)
    write_all(fd, HEADER.pack(len(payload)) + payload, deadline)


class Reader:
    """The grader's end of a child's output pipe: reads with a deadline and a size limit."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def exactly(self, n: int, deadline: float) -> bytes:
        """n bytes, or ChannelError if the pipe closes or the deadline passes first."""
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise ChannelError(f"no answer in time ({got} of {n} bytes)")
            chunk = os.read(self.fd, min(n - got, 1 << 20))
            if not chunk:
                raise ChannelError(f"the child closed its output ({got} of {n} bytes)")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def signal(self, deadline: float) -> bytes:
        return self.exactly(1, deadline)

    def raw(self, limit: int, deadline: float) -> bytes:
        (size,) = HEADER.unpack(self.exactly(HEADER.size, deadline))
        if size > limit:
            raise ChannelError(f"a message of {size} bytes, more than the {limit} allowed")
        return self.exactly(size, deadline)

    def message(self, limit: int, deadline: float) -> Dict:
        data = self.raw(limit, deadline)
        try:
            message = torch.load(io.BytesIO(data), weights_only=True)
        except Exception as err:
            raise ChannelError(f"an unreadable message ({type(err).__name__})") from None
        if not isinstance(message, dict):
            raise ChannelError("a message that is not a dict")
        return message


def receive(fd: int) -> Optional[Dict]:
    """The child's side: the next message from the grader, or None when the pipe closed."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    data = read_exactly(fd, size)
    if data is None:
        return None
    return torch.load(io.BytesIO(data), weights_only=True)


def read_exactly(fd: int, n: int) -> Optional[bytes]:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Child:
    """A started child (a grading.process.Running) and the grader's ends of its two pipes;
    its scratch folder, if any, goes with it."""

    def __init__(self, running, to_child: int, from_child: int, scratch: Optional[Path]) -> None:
        self.running, self.to_child, self.scratch = running, to_child, scratch
        self.reader = Reader(from_child)

    def deadline(self) -> float:
        return time.monotonic() + self.running.remaining_s()

    def send(self, message: Dict) -> None:
        send(self.to_child, message, self.deadline())

    def signal(self, byte: bytes) -> None:
        write_all(self.to_child, byte, self.deadline())

    def finish(self):
        """Closes the input (the child's loop ends), waits for the step, removes its scratch."""
        os.close(self.to_child)
        result = self.running.finish()
        os.close(self.reader.fd)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return result


def spawn(launch: Callable[[List[str], Tuple[int, ...]], Any], argv: List[str],
          extra_fds: Sequence[int] = (), scratch: Optional[Path] = None) -> Child:
    """Starts argv + [IN_FD, OUT_FD] with launch(argv, pass_fds) and returns the Child: the
    grader's ends of the two pipes (its input non-blocking, so a child that stops reading
    cannot hang the grader)."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    for fd in (to_w, from_w):
        widen(fd)
    os.set_blocking(to_w, False)
    try:
        running = launch(argv + [str(to_r), str(from_w)], (to_r, from_w, *extra_fds))
    except BaseException:
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)
        raise
    os.close(to_r)
    os.close(from_w)
    return Child(running, to_w, from_r, scratch)
