"""Fleet runs: the same doctor checks on many nodes, placed by Ray or Slurm, joined by `report merge`."""
