"""The `.pt2` gate: an archive is checked before torch reads a byte of it (archive.py: only
what torch.export.save writes, each member what it claims; allowlist.py: the pickled names it
may hold; expressions.py: the size expressions it may state), then loaded into an
ExportedProgram (load.py), the compile's first stage."""
