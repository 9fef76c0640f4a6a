"""Check modules. Each module registers its checks with envbuild.doctor.registry.check.

Module names start with their category (node_*, stack_*, gpu_*, comm_*, train_*) so the tree reads
like the report.
"""
