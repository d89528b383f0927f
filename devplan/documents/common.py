"""What more than one document holds: a file's name, a delegate's working memory outside the plan."""

from typing import Literal, Optional

from typing_extensions import TypedDict


class FileName(TypedDict):
    name: str


class WorkingMemory(TypedDict):
    """What a backend allocates itself at run time, where its payload says (XNNPACK's graph)."""

    bytes: Optional[int]
    values: Optional[int]
    bound: Literal["upper", None]
