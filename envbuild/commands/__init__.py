"""One module per command. Each imports only click at module level; heavy imports go inside the function."""
