"""The IPC plumbing of gpu.cumem_ipc / comm.weight_sync without a GPU: a memfd stands in for a cuMem POSIX-FD handle.

What is real here: two processes, an AF_UNIX socketpair, SCM_RIGHTS, and the seccomp filter that the
M3/O3 fault run installs in a consumer (pidfd_getfd -> EPERM, as Docker's default profile does).
"""
import os
import subprocess
import sys
import textwrap

import pytest

from envbuild.paths import payload_dir

sys.path.insert(0, str(payload_dir()))
import _ipc  # noqa: E402

CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {payloads!r})
    from _ipc import child_socket, recv_msg, send_msg
    role, sock = child_socket(sys.argv)
    msg, fds = recv_msg(sock)
    data = os.pread(fds[0], msg["n"], 0)
    os.pwrite(fds[0], data.upper(), 0)          # write through the received descriptor
    send_msg(sock, {{"role": role, "read": data.decode(), "fds": len(fds)}})
""")


def test_fd_passed_over_scm_rights_is_the_same_memory(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(payloads=str(payload_dir())))
    fd = os.memfd_create("envbuild-test")
    os.write(fd, b"weights-bucket")
    proc, sock = _ipc.spawn_child(str(script), "importer")
    try:
        _ipc.send_msg(sock, {"n": 14, "big": "x" * 100000}, fds=[fd])  # a frame larger than one recv
        reply, fds = _ipc.recv_msg(sock)
    finally:
        sock.close()
        assert proc.wait(timeout=30) == 0
    assert reply == {"role": "importer", "read": "weights-bucket", "fds": 1} and fds == []
    assert os.pread(fd, 14, 0) == b"WEIGHTS-BUCKET"  # the child's write is visible to the owner
    os.close(fd)


def test_recv_msg_reports_a_closed_peer():
    a, b = __import__("socket").socketpair()
    b.close()
    with pytest.raises(ConnectionError):
        _ipc.recv_msg(a)
    a.close()


BLOCKED = textwrap.dedent("""
    import sys
    sys.path.insert(0, {payloads!r})
    import _ipc
    {setup}
    try:
        fd = _ipc.pidfd_getfd({pid}, {fd})
        print("ok", fd)
    except OSError as exc:
        print("refused", exc.errno, exc)
""")


def _pull(setup, pid, fd, env=None):
    code = BLOCKED.format(payloads=str(payload_dir()), setup=setup, pid=pid, fd=fd)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_seccomp_fault_hook_refuses_pidfd_getfd_like_a_container_profile():
    r, w = os.pipe()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], pass_fds=[r])
    try:
        free = _pull("", holder.pid, r)
        if not free.startswith("ok"):
            pytest.skip(f"pidfd_getfd is refused here even without the hook: {free}")
        env = dict(os.environ, ENVBUILD_FAULT_IPC_BLOCK_PTRACE="seccomp")
        hooked = _pull("print(_ipc.apply_fault_hooks())", holder.pid, r, env=env)
        assert hooked.splitlines()[0] == "seccomp: pidfd_getfd -> EPERM"
        assert hooked.splitlines()[1].startswith("refused 1 ")
        assert "Operation not permitted" in hooked
    finally:
        holder.kill()
        holder.wait()
        os.close(r)
        os.close(w)


def test_unknown_fault_hook_is_an_error(monkeypatch):
    monkeypatch.setenv("ENVBUILD_FAULT_IPC_BLOCK_PTRACE", "yama")
    with pytest.raises(ValueError, match="only 'seccomp'"):
        _ipc.apply_fault_hooks()
    monkeypatch.delenv("ENVBUILD_FAULT_IPC_BLOCK_PTRACE")
    assert _ipc.apply_fault_hooks() is None
