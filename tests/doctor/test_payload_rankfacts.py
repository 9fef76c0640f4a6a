"""The payloads' stdlib-only helpers (checks/_rankfacts.py, checks/_common.py), imported from the payload folder the way the
payloads import them."""
import sys

from envbuild.paths import payload_dir

sys.path.insert(0, str(payload_dir()))
import _common  # noqa: E402  (payload helper shared with envbuild, stdlib only)
import _rankfacts  # noqa: E402  (payload helper, stdlib only)


MAPS = """\
7f00-7f10 r-xp 00000000 08:01 1 /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f10-7f20 r--p 00100000 08:01 1 /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3
7f30-7f40 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libnccl-net.so
7f40-7f50 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f50-7f60 r-xp 00000000 08:01 5 /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13 (deleted)
7f60-7f70 rw-p 00000000 00:00 0 [heap]
"""


def test_mapped_libs_lists_each_copy_once_and_skips_plugins():
    libs = _rankfacts.mapped_libs(MAPS)
    assert libs["libnccl"] == ["/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
                               "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"]
    assert libs["libcuda"] == ["/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"]
    assert libs["libcudart"][0].endswith("libcudart.so.13 (deleted)")
    assert _common.nccl_version_string(22809) == "2.28.9"
    assert _common.nccl_version_string(2708) == "2.7.8"


def test_privileges_and_alloc_conf_parsing():
    status = "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nSeccomp:\t2\nCapEff:\t0000000000080000\n"
    priv = _rankfacts.process_privileges(status, "1\n")
    assert priv == {"uid": 1000, "seccomp": "filter", "cap_sys_ptrace": True, "ptrace_scope": 1}
    assert _rankfacts.process_privileges("CapEff:\t0\n", None)["ptrace_scope"] is None
    assert _rankfacts.expandable_segments_on("max_split_size_mb:64,expandable_segments:True")
    assert not _rankfacts.expandable_segments_on("expandable_segments:False")
    assert not _rankfacts.expandable_segments_on(None)
