"""tomllib on Python >= 3.11, tomli before."""
import sys

if sys.version_info >= (3, 11):
    import tomllib as toml  # noqa: F401
else:  # pragma: no cover
    import tomli as toml  # noqa: F401

__all__ = ["toml"]
