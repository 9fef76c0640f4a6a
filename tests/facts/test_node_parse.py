"""Parsers of node text, on the real texts captured on the H200 and on the variants the checks must tell apart."""
from __future__ import annotations

from envbuild.facts import node_parse as P
from fakenode import H200X2


def real(path: str) -> str:
    return (H200X2 / path.lstrip("/")).read_text()


def test_driver_version_line_of_the_h200():
    m = P.parse_driver_version(real("/proc/driver/nvidia/version"))
    assert (m.version, m.open_module) == ("580.159.04", True)
    prop = P.parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 2024\n")
    assert (prop.version, prop.open_module) == ("535.183.01", False)


def test_limits_of_the_h200_and_unlimited():
    lim = P.parse_limits(real("/proc/self/limits"))
    assert lim["Max locked memory"][:2] == (None, None)  # unlimited
    assert lim["Max stack size"][0] == 8 * 1024 * 1024
    assert lim["Max open files"][:2] == (20000, 20000)


def test_mapped_libraries_and_soname_versions():
    maps = real("/proc/self/maps")
    libs = P.mapped_libraries(maps, "libnvidia-ml")
    assert len(libs) == 1 and P.version_from_soname(libs[0], "libnvidia-ml") == "580.159.04"
    assert P.version_from_soname("/usr/lib/libcuda.so.1", "libcuda") is None


def test_kernel_log_events():
    log = "\n".join([
        "[  10.1] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04",
        "[ 200.2] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "[ 201.0] NVRM: Xid (PCI:0000:19:00): 13, Graphics SM Warp Exception",
        "[ 300.0] NVRM: GPU at PCI:0000:1a:00: GPU has fallen off the bus.",
        "[ 400.0] NVRM: _kgspRpcRecvPoll: Timeout waiting for RPC from GSP!",
    ])
    ev = P.scan_kernel_log(log)
    assert [(e.kind, e.xid, e.pci) for e in ev] == [("xid", 79, "0000:18:00"), ("xid", 13, "0000:19:00"),
                                                    ("fallen_off_bus", None, None), ("gsp_timeout", None, None)]
    assert P.scan_kernel_log(real("/proc/cmdline")) == []


def test_sizes_mounts_and_df():
    assert P.parse_size("16g") == 16 * 1024 ** 3 and P.parse_size("65536k") == 64 * 1024 ** 2
    assert P.parse_size("50%") is None
    shm = [m for m in P.parse_mounts(real("/proc/mounts")) if m["mountpoint"] == "/dev/shm"]
    assert shm and shm[0]["fstype"] == "tmpfs"
    df = P.parse_df("Filesystem 1-blocks Used Available Capacity Mounted on\ntmpfs 1000 970 30 97% /dev/shm\n")
    assert df == {"size": 1000, "used": 970, "avail": 30}


def test_logind_remove_ipc_later_files_win():
    texts = [("/etc/systemd/logind.conf", "[Login]\n#RemoveIPC=yes\n"),
             ("/etc/systemd/logind.conf.d/10-hpc.conf", "[Login]\nRemoveIPC=no\n"),
             ("/etc/systemd/logind.conf.d/20-x.conf", "[Other]\nRemoveIPC=yes\n")]
    assert P.parse_logind_remove_ipc(texts) == (False, "/etc/systemd/logind.conf.d/10-hpc.conf")
    assert P.parse_logind_remove_ipc(texts[:1]) == (None, None)


def test_lspci_acs_and_bus_ids():
    text = ("00:01.0 PCI bridge: Intel Corporation Device\n"
            "\tCapabilities: [220 v1] Access Control Services\n"
            "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    assert list(P.parse_lspci_acs(text)) == ["0000:00:01.0"]
    assert P.pci_short("00000000:18:00.0") == "0000:18:00.0"
