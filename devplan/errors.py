"""The one exception type that devplan's commands turn into a single line and exit code 2."""


class DevplanError(Exception):
    """A problem with the user's input or options; the message names the file, node or op
    and says what to do. Never raised for bugs in devplan itself."""
