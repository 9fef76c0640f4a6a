"""Issue 25, session 26: readings written from the misses of held-out slices 64-67 (in-sample for those slices)."""
import pytest

from explain_helpers import fires


@pytest.mark.parametrize("line", [
    "0: ip-10-1-29-23:183654:183654 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ^docker,lo,veth",
    "export NCCL_SOCKET_IFNAME=^lo,docker0,veth",
])
def test_an_interface_named_in_an_exclusion_list_is_no_suspect_interface(line):
    # '^' makes the list one NCCL keeps away from: the veth it names is the interface it will not pick
    assert not fires("net.suspect_interface", line)


@pytest.mark.parametrize("line", [
    "node1:2211:2211 [0] NCCL INFO Bootstrap : Using veth3fa1c2:172.17.0.2<0>",
    "export NCCL_SOCKET_IFNAME=veth0",
    "NCCL picks the 169.254.3.1 link-local NIC for bootstrap",
])
def test_an_interface_nccl_picks_or_is_told_to_use_is_still_suspect(line):
    assert fires("net.suspect_interface", line)
