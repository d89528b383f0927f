"""Method passes: each takes devplan's built `Method` and returns a new one, torch.fx left
behind: copies, alias, compact, place, concat, schedule, inplace."""
