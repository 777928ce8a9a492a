"""Where the suite's temporary files go: a memory filesystem (``/dev/shm``) when the machine has a roomy one.

The suite creates and deletes files all the time: a test database is a copy of a template (about 300
files), a server start a copy of a data directory (about 1,100), and every server and test drops
them again. What a file creation costs the kernel depends on the filesystem: on tmpfs about 10 µs;
on an ext4 without a journal (common on virtual machines) the inode allocator skips every inode
freed in the last half minute, so in a directory the suite churns each creation cost 1.0-1.3 ms of
kernel time on the machine we measured, and a template copy 87-256 ms of the server's CPU against
47-55 ms on tmpfs. Nothing in the suite needs its scratch files to outlive the machine.

``TMPDIR`` set by the caller is kept. Otherwise, when ``/dev/shm`` is a tmpfs with at least
:data:`MIN_FREE` bytes free (a whole run peaked at about 0.5 GB), the suite's ``TMPDIR`` is a
directory of this user's there; on any other machine (a container's 64 MB ``/dev/shm``, macOS) the
system's default stays.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

SHM = Path("/dev/shm")
#: the free space ``/dev/shm`` needs: room for two copies of the suite at their peak, with headroom
MIN_FREE = 3 * 1024**3


def is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is itself the mount point of a tmpfs (read from the kernel's mount table)."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return False
    return any(
        len(fields) >= 3 and fields[1] == str(path) and fields[2] == "tmpfs"
        for fields in (line.split() for line in mounts.splitlines())
    )


def own_directory(parent: Path) -> Path | None:
    """This user's directory under ``parent``: created if missing, refused unless it is a real
    directory owned by this user (another user could have made one to read our files)."""
    path = parent / f"context-engine-tests-{os.getuid()}"
    try:
        path.mkdir(mode=0o755, exist_ok=True)  # the embedded server's own system user passes through
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return path


def choose() -> None:
    """Point ``TMPDIR`` (and :mod:`tempfile`) at ``/dev/shm`` when it suits; see the module's docstring.

    The processes the tests start inherit it, and pytest's ``tmp_path`` root follows it.
    """
    if os.environ.get("TMPDIR") or not is_tmpfs(SHM):
        return
    try:
        usage = os.statvfs(SHM)
    except OSError:
        return
    if usage.f_bavail * usage.f_frsize < MIN_FREE or not os.access(SHM, os.W_OK | os.X_OK):
        return
    directory = own_directory(SHM)
    if directory is None:
        return
    os.environ["TMPDIR"] = str(directory)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
