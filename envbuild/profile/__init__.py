"""Profiles of reference images: the model (model.py), its one reader (loader.py, `[recipe]` included) and
the one place that finds them (store.py). Import from here."""
from envbuild.profile.loader import SCHEMA_VERSION, load_profile_file
from envbuild.profile.model import Component, DockerRun, LaunchVar, Profile
from envbuild.profile.recipe import Recipe
from envbuild.profile.store import (lockfiles_base, load_profile, profile_names, profile_path, select_profile,
                                    select_profiles)

__all__ = ["SCHEMA_VERSION", "Component", "DockerRun", "LaunchVar", "Profile", "Recipe", "load_profile",
           "load_profile_file", "lockfiles_base", "profile_names", "profile_path", "select_profile", "select_profiles"]
