"""From a lowered graph to program objects: build.py turns a Lowered graph into a Method
(devplan/ir/; passes/graph/delegates.py cuts each delegate call's group out as a program of
its own for the driver to lower into its payload), and program.py writes planned methods as
the ET12 program's tables."""
