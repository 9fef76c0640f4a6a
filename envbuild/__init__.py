"""envbuild: rebuild an RL framework's Docker image as a pinned conda env, and prove the node sound."""

__version__ = "0.1.0"
