"""A FlatBuffers builder that writes each string and each small vector of numbers once.

A program repeats them: most tensors have one of a few shapes and dim orders, lists of
values repeat, every delegate names its backend, every constant method has the same output
spec. ExecuTorch's runtime only reads a program (it maps the file read-only, and copies the
sizes of a tensor it may resize before it resizes it), so two tables can point at one vector;
FlatBuffers' verifier, ExecuTorch's and devplan's (devplan/pte/verify.py), allows it. Written
once each, they made README's Llama under --quantize 8da4w 6.3 KB smaller (of 173 KB), which
paid for the stack traces devplan keeps and ExecuTorch's program does not (1.045x its file
before, 1.007x after).

Vectors of offsets (of tables or strings) are never shared: the same bytes at another place
point elsewhere."""

from __future__ import annotations

import flatbuffers

# vectors longer than this are data (an inline constant, a payload), not metadata: hashing
# them to find a twin costs more than it could save
_LARGEST_SHARED = 1024


class SharingBuilder(flatbuffers.Builder):  # type: ignore[misc]  # flatbuffers ships no types
    def __init__(self, initial_size: int) -> None:
        super().__init__(initial_size)
        self._strings: dict[bytes, int] = {}
        self._vectors: dict[tuple[int, bytes], int] = {}
        self._vector: tuple[int, int, int] | None = None  # (offset before it, element size, alignment)

    def CreateString(self, s: str | bytes, encoding: str = "utf-8", errors: str = "strict") -> int:
        text = s.encode(encoding, errors) if isinstance(s, str) else bytes(s)
        if text not in self._strings:
            self._strings[text] = super().CreateString(text)
        return self._strings[text]

    def StartVector(self, elemSize: int, numElems: int, alignment: int) -> int:
        before = self.Offset()
        offset: int = super().StartVector(elemSize, numElems, alignment)
        self._vector = (before, elemSize * numElems, alignment) if elemSize * numElems <= _LARGEST_SHARED else None
        return offset

    def PrependUOffsetTRelative(self, off: int) -> None:
        if self.nested:  # an element of the vector being written is an offset: it is not shared
            self._vector = None
        super().PrependUOffsetTRelative(off)

    def EndVector(self, numElems: int | None = None) -> int:
        # CreateString and CreateByteVector end a vector they did not start here: not shared
        started, self._vector = self._vector, None
        offset: int = super().EndVector(numElems) if numElems is not None else super().EndVector()
        if started is None:
            return offset
        before, size, alignment = started
        key = (alignment, bytes(self.Bytes[self.Head() : self.Head() + 4 + size]))
        if key not in self._vectors:
            self._vectors[key] = offset
            return offset
        start = len(self.Bytes) - before  # take back this copy and its padding
        self.Bytes[self.Head() : start] = bytes(start - self.Head())
        self.head = start
        return self._vectors[key]
