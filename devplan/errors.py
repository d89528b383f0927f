"""The exceptions that devplan's commands turn into a single line and exit code 2 (1 for BudgetExceeded)."""


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
