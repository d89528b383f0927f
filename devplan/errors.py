"""devplan's error taxonomy: the exit codes every command ends with, and the exceptions that
choose among them. The CLI turns each exception into one line on stderr:

    DevplanError     the user's input or options are unusable     EXIT_BAD_INPUT (2)
    BudgetExceeded   the program does not fit a --budget           EXIT_FAILED (1), as a failed check
    InternalError    a bug in devplan itself, named by its stage   EXIT_INTERNAL (3)

A failure of devplan's own checks inside a compile (the plan verifier refusing a plan that
devplan's planner made) is an InternalError too: the input was fine, devplan was not."""

EXIT_OK = 0  # the command did what was asked; a check or diff passed
EXIT_FAILED = 1  # a check failed, two programs differ, a plan is over its budget
EXIT_BAD_INPUT = 2  # unusable input or options: the line names the file, node or op and what to do
EXIT_INTERNAL = 3  # devplan's own bug: the line names the stage, the traceback is kept for the report
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT (128 + 2)


class DevplanError(Exception):
    """A problem with the user's input or options; the message names the file, node or op
    and says what to do. Never raised for bugs in devplan itself."""


class BudgetExceeded(DevplanError):
    """A plan that does not fit a --budget: the program fails a check, as `devplan check` does,
    so commands exit with code 1 for it (2 is for unusable input or options)."""


def first_line(error: BaseException) -> str:
    """An exception's first line of text, or its type's name when it has none: enough to
    name the cause inside devplan's own one-line messages."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class InternalError(Exception):
    """A bug in devplan itself, raised from the error that showed it: the command prints one
    line naming the stage and the graph node it was working on, and exits with code 3."""

    def __init__(self, stage: str, node: str | None = None) -> None:
        super().__init__(stage, node)
        self.stage, self.node = stage, node

    @classmethod
    def of(cls, stage: str, error: BaseException) -> "InternalError":
        """The innermost graph node (a local named `node`) that the failing code was working on."""
        import traceback

        frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
        names = [getattr(frame.f_locals.get("node"), "name", None) for frame in reversed(frames)]
        return cls(stage, next((name for name in names if isinstance(name, str)), None))
