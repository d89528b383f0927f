"""The compile's IRs, side by side, each a frozen dataclass the stages pass along:
lowered.py (Lowered: the graph the graph passes rewrite, and each delegate's Payload),
method.py (Method: values and kernel calls, what build makes and the method passes rewrite),
planned.py (PlannedMethod: a Method with every tensor placed, what emit writes)."""
