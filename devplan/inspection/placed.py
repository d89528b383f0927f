"""A placed tensor's fields as the views read them. The inspection document's tensors have
an offset, a lifetime and a held span only once planned and used (None otherwise); a view
draws only those tensors, filtered where it picks them, so it reads the fields here, where
a tensor that slipped through unplanned fails naming its value rather than with a TypeError."""

from __future__ import annotations

from devplan.documents import InspectedTensor, PeakTensor


def offset_of(tensor: InspectedTensor) -> int:
    """Where a placed tensor starts in its buffer."""
    if tensor["offset"] is None:
        raise ValueError(f"value {tensor['value']} has no offset: only placed tensors are drawn")
    return tensor["offset"]


def held_of(tensor: InspectedTensor | PeakTensor) -> list[int]:
    """[first, last]: the instructions over which a used tensor's bytes are held (the list
    itself, which bounds' view-holding pass widens in place)."""
    if tensor["held"] is None:
        raise ValueError(f"value {tensor['value']} is held by no instruction: only used tensors are drawn")
    return tensor["held"]


def lifetime_of(tensor: InspectedTensor) -> list[int]:
    """[first, last]: the instructions that touch a used tensor."""
    if tensor["lifetime"] is None:
        raise ValueError(f"value {tensor['value']} has no lifetime: only used tensors are drawn")
    return tensor["lifetime"]
