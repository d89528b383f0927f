"""Graph passes, each a short function over the graph held by a `Lowered` program."""
