"""`devplan ARGS` as the tests run it: in a child forked from the test's own process, which has
torch and devplan imported already, rather than a fresh `python -m devplan` (a second or more
of imports each time). The child takes the command line as the interpreter would hand it over
(argv, pipes for its three streams, its own folder and environment, a fresh `__main__`,
logging and warnings as an interpreter starts them), runs devplan's entry point and exits with
its code; the caller gets what `subprocess.run(..., capture_output=True, text=True)` gives.
A test about the process itself (imports, signals, limits, the interpreter's start) runs
`python -m devplan` instead."""

from __future__ import annotations

import io
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

_MAIN = str(Path(__file__).resolve().parents[1] / "devplan" / "__main__.py")


def devplan(
    *args: object, cwd: object = None, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """What `python -m devplan ARGS` prints and returns, run in a forked child."""
    argv = [str(arg) for arg in args]
    pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(argv, pipes, cwd, env)
    stdin, out, err = pipes[0][1], pipes[1][0], pipes[2][0]
    for end in (pipes[0][0], pipes[1][1], pipes[2][1]):
        os.close(end)
    try:
        stdout, stderr = _talk(stdin, out, err, (input or "").encode(), timeout)
    except BaseException:  # a timeout, an interruption: the child is not awaited
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(
        ["devplan", *argv], os.waitstatus_to_exitcode(status), _text(stdout), _text(stderr)
    )


def fresh_devplan(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`python -m devplan ARGS` in a fresh interpreter: for what happens as it starts (what it
    imports, what torch reads from the environment when first imported)."""
    kwargs.setdefault("timeout", 300)
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "devplan", *map(str, args)], capture_output=True, text=True, **kwargs
    )


def assert_one_line_error(run: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A refusal as devplan makes one: exit 2 and one line on stderr naming what was wrong."""
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("devplan: error:"), run.stderr
    assert "Traceback" not in run.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _talk(stdin: int, out: int, err: int, data: bytes, timeout: float) -> tuple[bytes, bytes]:
    """Write `data` to the child's stdin and read its stdout and stderr to their ends."""
    deadline = time.monotonic() + timeout
    got: dict[int, list[bytes]] = {out: [], err: []}
    with selectors.DefaultSelector() as selector:
        selector.register(stdin, selectors.EVENT_WRITE)
        for fd in got:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired("devplan", timeout)
                for key, _ in selector.select(left):
                    if key.fd == stdin:
                        try:
                            data = data[os.write(stdin, data[:65536]) :]
                        except BrokenPipeError:  # the child is done without reading it all
                            data = b""
                        if data:
                            continue
                    elif chunk := os.read(key.fd, 65536):
                        got[key.fd].append(chunk)
                        continue
                    selector.unregister(key.fd)  # a stream at its end, or stdin all written
                    os.close(key.fd)
        finally:
            for key in list(selector.get_map().values()):
                os.close(key.fd)
    return b"".join(got[out]), b"".join(got[err])


def _text(data: bytes) -> str:
    """As subprocess.run's text=True decodes: UTF-8 here, newlines made universal."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _child(argv: list[str], pipes: list[tuple[int, int]], cwd: object, env: dict[str, str] | None) -> None:
    code = 1
    try:
        for fd, (read, write) in enumerate(pipes):
            os.dup2(read if fd == 0 else write, fd)
            os.close(read)
            os.close(write)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        _as_a_fresh_interpreter(argv)
        from devplan.cli import main

        main()
        code = 0
    except SystemExit as done:
        code = _exit_code(done.code)
    except BaseException:  # as the interpreter ends on an uncaught exception
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a closed pipe: nothing more to say
                pass
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _as_a_fresh_interpreter(argv: list[str]) -> None:
    """What the test process set up that a fresh `python -m devplan` would not have: pytest's
    `__main__`, its handlers on the root logger, its warning filters and recorders."""
    sys.argv = [_MAIN, *argv]
    main = types.ModuleType("__main__")
    main.__package__ = "devplan"  # click names the program `python -m devplan` by it
    sys.modules["__main__"] = main
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
