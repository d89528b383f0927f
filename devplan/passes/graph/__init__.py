"""Graph passes: each takes a `Lowered` and returns it (its torch.fx graph edited in place),
from the split to the build: decompose, fold, views, sizes, and the delegates' groups."""
