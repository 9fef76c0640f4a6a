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

def _serve_upper(sock):
    """A helper that reads the memory behind the fd it receives, writes it back upper-cased through that fd, and
    answers with what it saw and the environment it was given."""
    msg, fds = _ipc.recv_msg(sock)
    data = os.pread(fds[0], msg["n"], 0)
    os.pwrite(fds[0], data.upper(), 0)          # write through the received descriptor
    _ipc.send_msg(sock, {"read": data.decode(), "fds": len(fds), "env": os.environ.get("ENVBUILD_TEST_HELPER"),
                         "ppid": os.getppid()})
    msg, _ = _ipc.recv_msg(sock)
    assert msg == {"op": "exit"}
    _ipc.send_msg(sock, {"ok": True})


def test_fd_passed_over_scm_rights_to_a_forked_helper_is_the_same_memory():
    fd = os.memfd_create("envbuild-test")
    os.write(fd, b"weights-bucket")
    helper = _ipc.Helper(_serve_upper, env={"ENVBUILD_TEST_HELPER": "given"}, timeout_s=30)
    try:
        reply = helper.ask({"n": 14, "big": "x" * 100000}, fds=[fd])  # a frame larger than one recv
    finally:
        helper.close()
    assert reply == {"read": "weights-bucket", "fds": 1, "env": "given", "ppid": os.getpid()}
    assert helper.exitcode == 0
    assert os.pread(fd, 14, 0) == b"WEIGHTS-BUCKET"  # the helper's write is visible to the owner
    assert "ENVBUILD_TEST_HELPER" not in os.environ  # the env was the helper's, not ours
    os.close(fd)


def _serve_hang(sock):
    import time

    time.sleep(600)


def test_a_helper_that_does_not_answer_is_killed_on_close():
    helper = _ipc.Helper(_serve_hang, timeout_s=0.5)
    with pytest.raises(OSError):  # socket.timeout is an OSError: the bounded wait of ask
        helper.ask({"op": "anything"})
    helper.sock.settimeout(0.1)
    helper.close()
    assert helper.exitcode == -9  # killed: it never answered


def test_a_helper_dies_with_its_probe(tmp_path):
    """PR_SET_PDEATHSIG: a probe killed with SIGKILL takes its forked helper with it."""
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(payload_dir())!r})
        import _ipc
        def serve(sock):
            time.sleep(600)
        h = _ipc.Helper(serve)
        print(h.process.pid, flush=True)
        time.sleep(600)
    """)
    probe = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    helper_pid = int(probe.stdout.readline())
    probe.kill()
    probe.wait(timeout=10)
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{helper_pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"helper {helper_pid} outlived its probe")
    probe.stdout.close()


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
