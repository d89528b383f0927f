"""Every file devplan reads or writes goes through here.

    write_atomic(path, data, on_written=...)  the whole new file or the old one, never half; through links
    read_input(path, limit=..., hint=...) a regular file's bytes, or standard input's for "-"
    read_bounded(stream, limit)          a stream's bytes, read in steps up to one more than `limit`
    open_input(path, hint=...)           a regular file opened for reading, without blocking on a pipe
    map_input(path, name=..., limit=..., hint=...)  a regular file as a private copy-on-write mapping
    refuse_overwrite(output, inputs, option)  an output must not be one of the command's inputs
    refuse_shared_output(outputs)        nor share standard output or a file with another output
    stdout_to_stderr()                   what is printed meanwhile goes to standard error
    is_stdout(path)                      "-", or a path naming what standard output is
    present(path)                        whether a path names something, a name no lookup takes refused

"-" is standard input or output. Refusals are DevplanErrors: one line naming the path and what to do."""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, BinaryIO

from typing_extensions import Buffer

from devplan.errors import DevplanError

STDIO = "-"
# temporaries are named after the file, cut short so that a legal long name (255 bytes) still
# leaves room for the temporary's own name
_NAME_KEPT = 32
# a piece larger than this (a weight of hundreds of megabytes) is written in steps of it, so
# that what reports the bytes written moves while it goes out
_STEP = 64 << 20
# what read_bounded asks a stream for at a time
_READ_STEP = 1 << 20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def write_atomic(
    path: str | os.PathLike[str],
    data: "bytes | bytearray | memoryview | Iterable[Buffer]",
    *,
    follow_links: bool = True,
    parents: bool = False,
    on_written: Callable[[int], None] | None = None,
) -> None:
    """Write `data` (bytes-like, or bytes-like pieces written one after another, which a large
    program's weights are) to `path` so that readers see the old file or the whole new one: a
    failure leaves no partial file and the old one untouched.

    "-" and what standard output is write to standard output; a character device or pipe
    (/dev/null, a FIFO) is written directly (it cannot be renamed onto). A symbolic link is
    followed to its final target, which is replaced, so the link stays a link; with
    `follow_links=False` the link itself is replaced by a regular file (for folders whose
    files devplan names, where a planted link must not redirect the write). Other special
    files are refused. `parents` creates missing folders. `on_written` is told the bytes
    written so far as the write goes on (a compile's progress)."""
    name = os.fspath(path)
    chunks = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else tuple(data)
    try:
        if is_stdout(name):
            sys.stdout.flush()
            for chunk in _counted(chunks, on_written):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return
        found = _stat(name, follow_links)
        if found is not None and (stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode)) and follow_links:
            return _write_stream(name, _counted(chunks, on_written))
        if found is not None and not (stat.S_ISREG(found.st_mode) or stat.S_ISLNK(found.st_mode)):
            raise DevplanError(
                f"{name}: is {_kind(found.st_mode)}; devplan writes regular files, character devices "
                f"and pipes; pass a file path"
            )
        # the link's final target, so that the temporary lands beside it and the rename replaces it
        target = os.path.realpath(name) if follow_links else os.path.abspath(name)
        directory = os.path.dirname(target)
        if parents:
            os.makedirs(directory, exist_ok=True)
        _remove_stale_temporaries(directory, os.path.basename(target))
        # the writer's pid in the name tells a later write whether this one may still be going on
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)[:_NAME_KEPT]}.{os.getpid()}.", suffix=".tmp", dir=directory
        )
    except OSError as error:
        raise DevplanError(
            f"{name}: cannot write ({error.strerror or error}); check that the directory exists and is writable"
        ) from None
    try:
        with os.fdopen(descriptor, "wb") as file:
            for chunk in _counted(chunks, on_written):
                file.write(chunk)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, _mode_for(found))
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise DevplanError(
                f"{name}: cannot write ({error.strerror or error}); check the path and free disk space"
            ) from None
        raise


def _stat(path: str, follow_links: bool) -> os.stat_result | None:
    try:
        return os.stat(path) if follow_links else os.lstat(path)
    except FileNotFoundError:  # a new file, or a link to one (the write creates its target)
        return None


def _counted(chunks: tuple[Buffer, ...], on_written: Callable[[int], None] | None) -> Iterator[Buffer]:
    """`chunks` in steps of at most _STEP bytes, `on_written` told the bytes written so far after
    each step (once the caller has written it, as the generator resumes)."""
    if on_written is None:
        yield from chunks
        return
    written = 0
    for chunk in chunks:
        view = memoryview(chunk)
        if view.nbytes > _STEP and view.c_contiguous:
            view = view.cast("B")
            steps: Iterable[memoryview] = (view[at : at + _STEP] for at in range(0, view.nbytes, _STEP))
        else:
            steps = (view,)
        for step in steps:
            yield step
            written += step.nbytes
            on_written(written)


def _write_stream(path: str, chunks: Iterable[Buffer]) -> None:
    """A character device or pipe, opened without O_CREAT: should it vanish meanwhile, no
    regular file appears in its place half written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    with os.fdopen(descriptor, "wb") as stream:
        for chunk in chunks:
            stream.write(chunk)


def is_stdout(path: str | os.PathLike[str]) -> bool:
    """Whether writing `path` writes standard output: "-", or a path (/dev/stdout) that names
    the file or pipe standard output is, whose writes then must not be mixed with messages."""
    name = os.fspath(path)
    if name == STDIO:
        return True
    if sys.__stdout__ is None:  # no standard output at all (pythonw, a detached process)
        return False
    try:
        return os.path.samestat(os.stat(name), os.fstat(sys.__stdout__.fileno()))
    except (OSError, ValueError, AttributeError):  # no such path, or no standard output
        return False


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Temporaries of `name` left by a writer that was killed outright (SIGKILL runs no cleanup):
    those whose pid no longer runs."""
    pattern = re.compile(rf"\.{re.escape(name[:_NAME_KEPT])}\.(\d+)\.[^.]+\.tmp")
    for entry in os.listdir(directory):
        match = pattern.fullmatch(entry)
        if match and not _running(int(match[1])):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, entry))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):  # gone, or a number no pid can be
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _mode_for(found: os.stat_result | None) -> int:
    """Keep an existing file's permissions; a new file gets what open() would give it."""
    if found is not None and stat.S_ISREG(found.st_mode):
        return stat.S_IMODE(found.st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def present(path: str | os.PathLike[str]) -> bool:
    """Path.exists(), but a name the system cannot look up at all (a component over 255 bytes:
    ENAMETOOLONG) is refused in one line: Path.exists raises it, an internal error."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link to itself names nothing, as Path.exists says
            return False
        raise DevplanError(
            f"{os.fspath(path)}: cannot look it up ({error.strerror or error}); check the path"
        ) from None
    return True


def open_input(path: str | os.PathLike[str], *, hint: str, name: str | None = None) -> BinaryIO:
    """`path` opened for reading, refused unless it is a regular file: a pipe would block
    forever and /dev/zero never end. Opened without blocking, so that asking about a FIFO
    with no writer returns at once. `hint` says what to pass instead; `name` names the file."""
    name = name or os.fspath(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise DevplanError(f"{name}: no such file; check the path") from None
    except IsADirectoryError:
        raise DevplanError(f"{name}: is a directory; {hint}") from None
    except PermissionError:
        raise DevplanError(f"{name}: permission denied; check the file's permissions") from None
    except OSError as error:
        raise DevplanError(f"{name}: cannot read ({error.strerror or error}); check the path") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise DevplanError(f"{name}: is {_kind(mode)}, not a regular file; {hint}")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def map_input(path: str | os.PathLike[str], *, name: str, limit: int, hint: str) -> bytes | memoryview:
    """A regular file as a private copy-on-write mapping: pages are read when touched, so that
    a reader of a FlatBuffer never reads the weights behind it, and the runtime uses them in
    place (a kernel that wrote one would change this process's copy, never the file). An
    empty file is b""; one over `limit` bytes is refused."""
    with open_input(path, hint=hint, name=name) as file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise DevplanError(f"{name}: larger than the {limit} bytes devplan reads for it; {hint}")
        if size == 0:  # nothing to map; the caller names the empty file
            return b""
        try:
            return memoryview(mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY))
        except OSError as error:
            raise DevplanError(f"{name}: cannot read ({error.strerror or error}); check the path") from None


def read_input(path: str | os.PathLike[str], *, limit: int, hint: str, name: str | None = None) -> bytes:
    """The bytes of a regular file, or with "-" of standard input (read once: it cannot be
    read again), refused when more than `limit`."""
    name = name or os.fspath(path)
    too_large = DevplanError(f"{name}: larger than the {limit} bytes devplan reads for it; {hint}")
    try:
        if os.fspath(path) == STDIO:
            data = read_bounded(sys.stdin.buffer, limit)
        else:
            with open_input(path, hint=hint, name=name) as file:
                if os.fstat(file.fileno()).st_size > limit:
                    raise too_large
                data = read_bounded(file, limit)  # the file may have grown since
    except OSError as error:
        raise DevplanError(f"{name}: cannot read ({error.strerror or error}); check the path") from None
    if len(data) > limit:
        raise too_large
    return data


def read_bounded(stream: BinaryIO, limit: int, read: bytes = b"") -> bytes:
    """What `stream` holds, or its first `limit` + 1 bytes when it holds more (for the caller to
    refuse), read _READ_STEP bytes at a time: read(n) allocates n bytes before reading any, so
    asking for the whole limit at once (16 GiB for a program) fails under an address-space
    limit, however small the input. `read` is what was read of it already, counted in."""
    kept = io.BytesIO()  # grows with what is read; getvalue() hands over its bytes without a copy
    kept.write(read)
    while kept.tell() <= limit:
        chunk = stream.read(min(_READ_STEP, limit + 1 - kept.tell()))
        if not chunk:
            break
        kept.write(chunk)
    return kept.getvalue()


def refuse_overwrite(
    output: str | os.PathLike[str] | None, inputs: Iterable[str | os.PathLike[str] | None], option: str
) -> None:
    """Refuse an output that is, or resolves to (through links, or another name of the same
    file), one of the command's inputs: the write would destroy what it was made from."""
    if output is None or is_stdout(output):
        return
    for source in inputs:
        if source is None or os.fspath(source) == STDIO:
            continue
        try:
            same = os.path.samefile(output, source)
        except OSError:  # one does not exist (yet): the same path once links are resolved?
            same = os.path.realpath(output) == os.path.realpath(source)
        if same:
            raise DevplanError(f"{output}: {option} would overwrite the input {source}; pass {option} another name")


def refuse_shared_output(outputs: Mapping[str, str | os.PathLike[str] | None]) -> None:
    """Refuse two outputs (option: path) on standard output, or on one file: their bytes would run
    together into one stream no reader can split (a program followed by its .ptd), or the second
    write would replace the first without a word."""
    taken: dict[str, tuple[str, str]] = {}  # standard output or a file (real path) -> (option, path)
    for option, path in outputs.items():
        if path is None:
            continue
        where = STDIO if is_stdout(path) else os.path.realpath(path)
        if where in taken:
            said = "standard output" if where == STDIO else f"the file {taken[where][1]}"
            raise DevplanError(
                f"{path}: {option} would write {said}, which {taken[where][0]} writes; pass {option} another file"
            )
        taken[where] = (option, os.fspath(path))


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Whatever is printed meanwhile goes to standard error: standard output may carry a
    program (-o -), whose bytes an imported module's greeting would corrupt. Python's print
    is redirected, and a C extension's write(1, ...) too, by pointing descriptor 1 at 2."""
    _flush(sys.stdout)  # what was printed before goes where it was meant to
    saved = _point_stdout_at_stderr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _flush(sys.stderr)
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _flush(stream: IO[Any] | None) -> None:
    if stream is not None:  # None: the interpreter runs without that stream
        stream.flush()


def _point_stdout_at_stderr() -> int | None:
    """Descriptor 1 made a copy of 2; a copy of the old 1 returned to restore it, None when
    either is closed (nothing to keep clean, or nowhere to send it)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")
