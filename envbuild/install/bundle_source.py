"""Where `envbuild create --bundle` gets its bundle from: envbuild.pack.bundle.open_bundle (owned by pack).

Kept as the import path commands/create.py uses; the bundle format, extraction and verification live in
envbuild/pack/bundle.py so that `pack` and `create` cannot disagree on them.
"""
from envbuild.pack.bundle import BundleLayout, open_bundle

__all__ = ["BundleLayout", "open_bundle"]
