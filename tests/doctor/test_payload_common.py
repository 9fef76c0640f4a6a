"""checks/_common.py: the one stdlib-only module both sides use — payloads import it as `_common`, envbuild as
`envbuild.data.checks._common` (the same file) — for /proc/<pid>/maps, version codes and size labels."""
import sys

from envbuild.data.checks import _common as from_envbuild
from envbuild.paths import payload_dir

sys.path.insert(0, str(payload_dir()))
import _common  # noqa: E402  (as the payloads import it)

MAPS = """\
7f00-7f10 r-xp 00000000 08:01 1 /opt/venv/nvidia/nccl/lib/libnccl.so.2
7f10-7f20 r--p 00100000 08:01 1 /opt/venv/nvidia/nccl/lib/libnccl.so.2
7f20-7f30 rw-p 00000000 00:00 0
7f30-7f40 r-xp 00000000 08:01 5 /opt/venv/nvidia/cu13/lib/libcudart.so.13 (deleted)
7f40-7f50 rw-p 00000000 00:00 0 [heap]
7f50-7f60 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
"""


def test_both_sides_load_the_same_file():
    assert from_envbuild.__file__ and _common.__file__
    assert open(from_envbuild.__file__).read() == open(_common.__file__).read()


def test_maps_are_read_once_per_file_in_first_mapped_order():
    assert _common.mapped_paths(MAPS) == ["/opt/venv/nvidia/nccl/lib/libnccl.so.2",
                                          "/opt/venv/nvidia/cu13/lib/libcudart.so.13 (deleted)",
                                          "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"]
    assert _common.library_name("/opt/venv/nvidia/cu13/lib/libcudart.so.13 (deleted)") == "libcudart.so.13"


def test_version_codes():
    assert _common.nccl_version_string(22809) == "2.28.9" and _common.nccl_version_string(2708) == "2.7.8"
    assert _common.cuda_version_string(12090) == "12.9" and _common.cuda_version_string(13000) == "13.0"
    assert _common.cuda_version_string(0) is None
    assert _common.cudnn_version_string(91900) == "9.19.0" and _common.cudnn_version_string(8902) == "8.9.2"


def test_size_labels_are_exact_and_human_sizes_readable():
    assert [_common.size_label(b) for b in (1 << 20, 64 << 20, 1 << 30, 4096, 4097)] == \
        ["1MiB", "64MiB", "1GiB", "4KiB", "4097B"]
    assert [_common.human_bytes(b) for b in (64 << 20, int(15.6 * (1 << 30)), 512)] == ["64 MiB", "15.6 GiB", "512 B"]


def test_the_launchers_variables_are_undone_to_the_users_values():
    """The launcher's rank_env names what it set (ENVBUILD_LAUNCHER_SET); user_environ gives back the caller's
    environment exactly: a pinned value at the user's own, an added one gone, the rest untouched."""
    from envbuild.doctor.launcher import rank_env

    base = {"NCCL_NVLS_ENABLE": "1", "NCCL_CUMEM_ENABLE": "0", "PATH": "/bin"}
    env = rank_env(0, 2, port=1234, run_dir="/tmp/r", gpus=[3, 5], backend="gloo", deadline_s=10, base=base,
                   extra={"NCCL_DEBUG": "INFO"}, per_rank=None, allow_nvls=False, pythonpath="/p")
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["CUDA_VISIBLE_DEVICES"] == "3,5" and env["NCCL_DEBUG"] == "INFO"
    assert _common.user_environ(env) == base
    assert _common.user_environ(base) == base  # no marker: as is
