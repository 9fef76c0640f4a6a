"""The recipe model moved to envbuild.profile.recipe, where it is validated with the rest of profile.toml.

Kept as a name for the pip layer's modules and tests (`from envbuild.lock.recipe import PipIndex`), which
another branch edits at the same time; new code imports envbuild.profile.recipe.
"""
from envbuild.profile.recipe import (Activation, CondaLayer, GitSource, PipIndex, PipLayer, Recipe,  # noqa: F401
                                     SourceBuild)
