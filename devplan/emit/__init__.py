"""From a lowered graph to program objects: the Method's values and instructions
(build.py; the Method IR is devplan/ir/method.py), each delegate's payload (delegate.py), then
the ET12 program tables (program.py)."""
