"""Installing a locked environment: conda layer, pip layer, git sources, source builds, activation."""
