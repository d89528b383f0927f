"""From a lowered graph to program objects: the method's values and instructions
(method.py), then the ET12 program tables (program.py)."""
