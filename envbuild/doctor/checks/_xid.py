"""The source node.kernel_log and node.ecc both cite for their thresholds: NVIDIA's Xid catalog."""

XID_DOC = "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors); cause D3 of envbuild/knowledge/causes.toml"
