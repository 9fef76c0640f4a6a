"""Read-only node and environment facts, read through a FactSource so a captured bundle can replace the node."""
