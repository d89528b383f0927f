"""The .pte container: read (checked), write (byte-for-byte deterministic, atomic).

read_pte(path_or_bytes)                 -> PteFile (program, segments, size, header)
dumps_pte(program, segments)            -> bytes
write_pte(path, program, segments)      -> None
write_atomic(path, data)                -> None"""

from devplan.pte.header import ExtendedHeader
from devplan.pte.reader import PteFile, read_pte
from devplan.pte.writer import dumps_pte, write_atomic, write_pte

__all__ = ["ExtendedHeader", "PteFile", "dumps_pte", "read_pte", "write_atomic", "write_pte"]
