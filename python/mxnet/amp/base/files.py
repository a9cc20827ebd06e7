"""Files written whole or not at all: trainer states, converted models, ONNX files.

Each is written to a temporary file beside its final path, flushed and fsync'ed, given the permissions a plain
``open(path, "wb")`` would give it (an existing file's mode, else ``0o666`` less the umask), and renamed over
the path with ``os.replace`` (atomic on POSIX and Windows); the folder is fsync'ed where supported. A crash
leaves the old file or the new one, never a mix. The temporary file is named ``.NAME.HOST.PID.RANDOM.tmp``: a
writer killed mid-write (SIGKILL runs no cleanup) leaves one behind, and the next write of the same path on
that host removes those whose process is gone.
"""
import contextlib
import os
import socket
import tempfile
from typing import Iterator

__all__ = ["atomic_write", "atomic_output", "temporary_beside", "finish", "stale_temporaries"]


def _host() -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname()) or "host"


def _prefix(path: str) -> str:
    return ".%s.%s." % (os.path.basename(path), _host())


def _umask() -> int:
    """This process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: the only portable way to read it
    os.umask(mask)
    return mask


def _mode_for(path: str) -> int:
    """What ``open(path, "wb")`` would leave: the existing file's permissions, else ``0o666`` less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def stale_temporaries(path: str) -> list:
    """The temporary files of ``path`` left on this host by writers whose process is gone."""
    folder, prefix = os.path.dirname(os.path.abspath(path)), _prefix(path)
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            found.append(os.path.join(folder, name))
    return found


def temporary_beside(path: str) -> str:
    """Create an empty temporary file in ``path``'s folder (removing the stale ones of dead writers first);
    return its path."""
    for stale in stale_temporaries(path):
        with contextlib.suppress(OSError):
            os.remove(stale)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=_prefix(path) + "%d." % os.getpid(), suffix=".tmp", dir=folder)
    os.close(fd)
    return tmp


def finish(tmp: str, path: str) -> None:
    """fsync ``tmp``, give it the mode ``path`` would get, rename it over ``path`` and fsync the folder."""
    with open(tmp, "rb+") as out:
        os.fsync(out.fileno())
    os.chmod(tmp, _mode_for(path))
    os.replace(tmp, path)
    if hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """Yield a temporary path to write; when the block ends normally it replaces ``path``, otherwise it is
    removed and ``path`` is untouched."""
    tmp = temporary_beside(path)
    try:
        yield tmp
        finish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (see the module docstring)."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as out:
            out.write(data)
