"""The `devplan` entry point: what a command's end becomes. Every user-facing failure is one
line on stderr and an exit code of its kind (devplan.errors); a bug in devplan itself one line
too, with its traceback kept in a log file (or printed with --debug, which any command takes)."""

from __future__ import annotations

import os
import sys

import typer

try:  # newer typer releases carry their own copy of click
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors  # type: ignore[no-redef]

from devplan.cli.app import app
from devplan.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BudgetExceeded,
    DevplanError,
    first_line,
)


def main() -> None:
    """Entry point: every user-facing failure becomes one line on stderr and EXIT_BAD_INPUT; a bug
    in devplan itself one line too, EXIT_INTERNAL, with its traceback in a log file (or printed
    with --debug, which any command takes)."""
    debug = "--debug" in sys.argv[1:]
    sys.argv[1:] = [arg for arg in sys.argv[1:] if arg != "--debug"]
    import signal

    if os.environ.get("NO_COLOR"):  # typer's help, like devplan's views (_console), then has no styles at all
        from typer import rich_utils  # (an `import typer.rich_utils` here would make typer local to main)

        rich_utils.COLOR_SYSTEM = None

    # SIGTERM as an exit, so that a write in progress removes its temporary file on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if debug:  # a compile checks each stage's result too (devplan/wellformed.py), naming the stage that broke it
        os.environ["DEVPLAN_CHECK_STAGES"] = "1"
        import logging

        # what devplan notes on the way (a delegate that runs without a CUDA graph, and why)
        logging.getLogger("devplan").addHandler(logging.StreamHandler())
        logging.getLogger("devplan").setLevel(logging.DEBUG)
    else:  # torch's deprecation chatter is not the user's to act on; --debug shows it
        import logging
        import warnings

        # nor is a logging call failing inside torch (a message with more %s than arguments, a
        # closed stream): logging would print '--- Logging error ---' and a traceback for it
        logging.raiseExceptions = False
        # nor what libraries log on the way with no handler of their own (torchao's "Failed to
        # load ..." for kernels this machine lacks, as --kernels llama imports it), which Python
        # prints through its last-resort handler; handlers devplan adds (load reads torch's
        # warnings for their reasons) still get every record
        logging.lastResort = None

        warnings.simplefilter("ignore")
        # and what torch warns from C++ (TORCH_WARN, e.g. a kernel resizing an out tensor) goes to
        # stderr through its own logging, which reads this once, when torch is first imported
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        # and its Python warnings (a range it cannot bound in a damaged archive's sizes) before
        # devplan's own line: torch sets its loggers' levels from this when first imported
        os.environ.setdefault("TORCH_LOGS", "-all")
    try:
        # outside standalone mode click hands back a command's exit code instead of exiting
        code = app(standalone_mode=False)
        sys.stdout.flush()  # inside the try: a Ctrl-C while the last lines go out is an interruption too
        if isinstance(code, int) and code:
            sys.exit(code)
    except BudgetExceeded as error:  # the program fails a check, as `devplan check` exits for it
        _fail(str(error), code=EXIT_FAILED)
    except DevplanError as error:
        _fail(str(error))
    except click_errors.UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `devplan` or `devplan compile`: show help
            print(error.format_message())
            sys.exit(EXIT_OK)
        command = error.ctx.command_path if error.ctx else "devplan"
        _fail(f"{error.format_message()} (see '{command} --help')")
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:
        _fail("aborted")
    except KeyboardInterrupt:  # no traceback; a write in progress has removed its temporary file
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C on the way out changes nothing
        print("devplan: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except MemoryError:
        _fail("out of memory; try a smaller model or a machine with more memory")
    except Exception as error:  # devplan's own bug: one line, the traceback kept for the report
        _internal(error, debug)


def _internal(error: Exception, debug: bool) -> None:
    import tempfile
    import traceback

    from devplan import __version__
    from devplan.errors import InternalError
    from devplan.units import inert, printable

    cause = error.__cause__ if isinstance(error, InternalError) and error.__cause__ else error
    where = (
        f"in stage {error.stage}" + (f" at node {error.node}" if error.node else "")
        if isinstance(error, InternalError)
        else f"in devplan {' '.join(sys.argv[1:2])}".rstrip()
    )
    text = "".join(traceback.format_exception(error))
    if debug:
        print(text, file=sys.stderr, end="")
        kept = "printed above"
    else:
        handle, log = tempfile.mkstemp(prefix="devplan-internal-error-", suffix=".log")
        with open(handle, "w") as f:
            f.write(text)
        kept = f"traceback in {log}; rerun with --debug to print it"
    print(
        inert(
            printable(
                f"devplan: internal error {where} (devplan {__version__}): {type(cause).__name__}: "
                f"{first_line(cause)}; {kept}; please report it"
            )
        ),
        file=sys.stderr,
    )
    sys.exit(EXIT_INTERNAL)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    from devplan.units import inert, printable

    print(f"devplan: error: {inert(printable(message))}", file=sys.stderr)
    sys.exit(code)
