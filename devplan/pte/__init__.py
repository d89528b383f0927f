"""The .pte container: read (checked), write (byte-for-byte deterministic, atomic).

read_pte(path_or_bytes)                 -> PteFile (program, segments, size, header), read within
                                           MAX_PROGRAM_BYTES; devplan.pte.program_view and
                                           devplan.pte.decode make its views
dumps_pte(program, segments)            -> bytes
write_pte(path, program, segments)      -> None
write_atomic(path, data)                -> None"""

from devplan.files import write_atomic
from devplan.pte.header import MAX_PROGRAM_BYTES, ExtendedHeader
from devplan.pte.reader import PteFile, read_pte
from devplan.pte.writer import dumps_pte, write_pte

__all__ = ["MAX_PROGRAM_BYTES", "ExtendedHeader", "PteFile", "dumps_pte", "read_pte", "write_atomic", "write_pte"]
