"""The one exception type that devplan's commands turn into a single line and exit code 2."""


class DevplanError(Exception):
    """A problem with the user's input or options; the message names the file, node or op
    and says what to do. Never raised for bugs in devplan itself."""


def first_line(error: BaseException) -> str:
    """An exception's first line of text, or its type's name when it has none: enough to
    name the cause inside devplan's own one-line messages."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
