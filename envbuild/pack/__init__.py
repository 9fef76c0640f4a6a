"""`envbuild pack`: the offline bundle (bundle.py: format, open_bundle; builder.py: making one)."""
