"""Solving and lock I/O: recipe model, conda layer solve, conda-lock v1 writer."""
