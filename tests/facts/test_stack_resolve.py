"""The stack probe's resolve-only path (checks/_loader_trace.py, what `envbuild create`'s gate runs): the copies
torch's libraries would bind, asked of the real dynamic loader (LD_TRACE_LOADED_OBJECTS) instead of loading them.

The torch is tests/stackfix.py's fake_torch: real ELF libraries in the pip wheel's layout, whose libtorch_cuda
leaves a file behind when it is loaded (FAKE_TORCH_LOADED), so a test can tell that nothing of torch ran.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from stackfix import (FULL_CUDART_SRC, FULL_NCCL_SRC, PROBE, build_lib, fake_cudart, fake_libcuda, fake_torch,
                      full_nccl, need_gcc, run_doctor, run_probe, torch_env)

sys.path.insert(0, str(__import__("stackfix").REPO / "checks"))
import _elf  # noqa: E402  (checks/ is not a package: the probe runs it as a script directory)
from _common import LOADER_TRACE, RESOLVED_INIT  # noqa: E402


def _env(site, **extra):
    return torch_env(PYTHONPATH=str(site), **extra)


def _copies(data):
    return sorted((m["family"], m["path"]) for m in data["mapped"])


def _children(tmp_path, script="_early_init.py"):
    """Live processes of `script` started for this test: the copies' paths in their arguments lie under tmp_path (so
    a concurrent run's processes are not counted)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                args = fh.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(script.encode()) for a in args) and any(str(tmp_path).encode() in a for a in args):
            pids.append(int(pid))  # a zombie's cmdline is empty: only running ones are listed
    return pids


def _none_left(tmp_path, script="_early_init.py", within_s=1.0):
    """Whether every such process is gone within `within_s`."""
    deadline = time.monotonic() + within_s
    while _children(tmp_path, script) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _children(tmp_path, script)


def _started(tmp_path, script="_early_init.py", within_s=5.0):
    """Whether such a process runs within `within_s` (its command line shows once its exec is done)."""
    deadline = time.monotonic() + within_s
    while not _children(tmp_path, script) and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(_children(tmp_path, script))


def _probe(env, *args, timeout=60):
    """(the probe's JSON, its pid), run as run_probe runs it."""
    proc = subprocess.Popen([sys.executable, str(PROBE)] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    out, err = proc.communicate(timeout=timeout)
    assert out.strip(), err[-2000:]
    data = json.loads(out)
    data["_rc"], data["_stderr"] = proc.returncode, err
    return data, proc.pid


IN_PROCESS = """import sys
sys.path.insert(0, sys.argv.pop(1))
import stack_probe
stack_probe.start_early_init = lambda spec, gate_path: None
stack_probe.main(sys.argv[1:])
"""


def _in_process_probe(env, *args):
    """The probe with no init beside the trace: CUDA and NCCL initialised in its own process, the path before it."""
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS, str(PROBE.parent)] + list(args), capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.stdout.strip(), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    data["_rc"], data["_stderr"] = proc.returncode, proc.stderr
    return data


def _cuda_callers(path):
    """The process ids that made a CUDA call (FAKE_CUDA_CALLS), in order."""
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _versions(data):
    """Each mapped copy with the versions read of it (from the file, and from its C API in a child process)."""
    return sorted((m["family"], m["path"], m.get("version")) for m in data["mapped"])


def test_resolve_only_maps_what_loading_maps_and_runs_none_of_torchs_code(tmp_path):
    """torch 2.11's _load_global_deps preloads the wheel's libnccl by path; with another libnccl in LD_PRELOAD
    loading maps both. The trace must name the same two copies, torch's built NCCL and the runtime's version, while
    libtorch_cuda's constructor never runs."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    other = full_nccl(tmp_path / "other", "2.28.3")
    loaded, traced = tmp_path / "loaded", tmp_path / "traced"
    full = run_probe(_env(site, LD_PRELOAD=str(other), FAKE_TORCH_LOADED=str(loaded)))
    gate = run_probe(_env(site, LD_PRELOAD=str(other), FAKE_TORCH_LOADED=str(traced)), "--resolve-only")
    assert gate["_rc"] == 0, gate["_stderr"]
    assert loaded.exists() and not traced.exists()
    assert _copies(gate) == _copies(full)
    assert sorted(p for f, p in _copies(gate) if f == "libnccl") == sorted(
        [str(other), str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")])
    t = gate["torch"]
    assert t["method"].startswith(LOADER_TRACE) and gate["init"]["method"].startswith(LOADER_TRACE)
    assert "resolve_path" not in t
    assert t["nccl_version"] == full["torch"]["nccl_version"] == "2.28.9"  # read from libtorch_cuda's code
    assert gate["cuda_runtime"] == full["cuda_runtime"]
    assert gate["init"]["source"] == LOADER_TRACE and gate["init"]["nccl_group"] is False


def test_the_bound_runtime_is_torchs_major_not_a_preloaded_one_of_another(tmp_path):
    """A libcudart.so.12 in LD_PRELOAD is mapped (and loaded first) beside torch cu130's libcudart.so.13, but torch's
    runtime calls bind to its own major's: cuda_runtime names that copy, from the trace as from loading."""
    site = tmp_path / "site"
    fake_torch(site)
    cu12 = fake_cudart(tmp_path / "cu12", 12, 12080)
    env = _env(site, LD_PRELOAD=str(cu12))
    full = run_probe(env)
    gate = run_probe(env, "--resolve-only")
    wheel = str(site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    for data in (gate, full):
        assert sorted(p for f, p in _copies(data) if f == "libcudart") == sorted([str(cu12), wheel])
        assert (data["cuda_runtime"]["path"], data["cuda_runtime"]["version"]) == (wheel, "13.0")


def test_a_library_the_loader_cannot_find_sends_the_probe_to_loading_with_the_reason(tmp_path):
    """The trace cannot stand in for a failing load: the probe then loads (and here imports) torch as `envbuild
    doctor` does, so the verdict is the full probe's, and resolve_path says why."""
    site = tmp_path / "site"
    fake_torch(site)
    (site / "torch" / "lib" / "libtorch_cuda.so").unlink()  # a name no ld.so cache holds
    full = run_probe(_env(site))
    gate = run_probe(_env(site), "--resolve-only")
    assert gate["torch"]["resolve_path"] == "not used: the loader finds no libtorch_cuda.so"
    assert gate["torch"]["present"] is full["torch"]["present"] is False
    assert gate["torch"]["error"] == full["torch"]["error"]


def test_the_driver_the_cuda_runtime_would_open_is_resolved_too(tmp_path):
    """libcudart opens libcuda.so.1 by name at its first call; the trace asks for it the same way, so a stub first on
    LD_LIBRARY_PATH is the mapped libcuda, with its C API's CUDA_ERROR_STUB_LIBRARY (read in a child process)."""
    site = tmp_path / "site"
    fake_torch(site)
    stubs = tmp_path / "stubs"
    stub = fake_libcuda(stubs, driver="999.0.0", rc=34)
    gate = run_probe(_env(site, LD_LIBRARY_PATH=str(stubs)), "--resolve-only")
    libcuda = [m for m in gate["mapped"] if m["family"] == "libcuda"]
    assert [m["path"] for m in libcuda] == [str(stub)]
    assert "returned 34" in libcuda[0]["api_error"]
    assert gate["cuda_driver"]["mapped"] is True and gate["cuda_driver"]["path"] == str(stub)
    without = run_probe(_env(site), "--resolve-only")
    assert not [m for m in without["mapped"] if m["family"] == "libcuda"]  # none reachable: none mapped


def test_elf_reads_only_plain_constant_returns(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    torch_cuda = site / "torch" / "lib" / "libtorch_cuda.so"
    assert _elf.returned_integer(str(torch_cuda), "_ZN5torch4cuda4nccl7versionEv") == (2 << 32) | (28 << 16) | 9
    assert _elf.returned_string(str(torch_cuda), "_ZN5torch4cuda4nccl14version_suffixEv") == ""
    assert _elf.returned_integer(str(torch_cuda), "envbuild_no_such_symbol") is None
    cudart = site / "nvidia" / "cu13" / "lib" / "libcudart.so.13"  # cudaGetDeviceCount is not `return constant`
    assert _elf.returned_integer(str(cudart), "cudaGetDeviceCount") is None
    text = tmp_path / "not-elf.so"
    text.write_bytes(b"not an ELF file" * 8)
    with pytest.raises(ValueError):
        _elf.returned_integer(str(text), "anything")


def test_a_dependency_of_an_earlier_open_is_mapped_beside_a_later_by_path_open_of_its_soname(tmp_path):
    """libtorch_global_deps needs libnccl.so.2, which its RPATH finds in the wheel; _load_global_deps then opens
    another libnccl.so.2 by path (the first on sys.path). Each real dlopen resolves its dependencies at once, so the
    import maps both; one trace with both in LD_PRELOAD would map only the by-path one."""
    site, first = tmp_path / "site", tmp_path / "first"
    fake_torch(site, preloading=True, global_deps_nccl=True)
    by_path = full_nccl(first / "nvidia" / "nccl" / "lib", "2.28.3")
    env = torch_env(PYTHONPATH=os.pathsep.join([str(first), str(site)]))
    full = run_probe(env)
    gate = run_probe(env, "--resolve-only")
    assert gate["init"]["source"] == LOADER_TRACE, gate["torch"]
    wheel = str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert sorted(p for f, p in _copies(full) if f == "libnccl") == sorted([wheel, str(by_path)])
    assert _copies(gate) == _copies(full)


def _versioned_cudart(site, tmp_path):
    """libtorch_global_deps linked against a libcudart.so.13 whose cudaRuntimeGetVersion is at version CUDART_13,
    while the wheel's copy defines only CUDART_12: loading fails with "version `CUDART_13' not found"."""
    gcc = need_gcc()
    cu13 = site / "nvidia" / "cu13" / "lib"

    def cc(out, source, script_node, *flags):
        src, script = out.with_suffix(".c"), out.with_suffix(".map")
        src.write_text(source)
        script.write_text("%s { global: *; };\n" % script_node if script_node else "")
        cmd = [gcc, "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,-soname,%s" % out.name] + list(flags)
        if script_node:
            cmd.append("-Wl,--version-script,%s" % script)
        subprocess.run(cmd, check=True, capture_output=True)
        src.unlink()
        script.unlink()

    linked = tmp_path / "link" / "libcudart.so.13"
    linked.parent.mkdir()
    cc(linked, "int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n", "CUDART_13")
    cc(site / "torch" / "lib" / "libtorch_global_deps.so",
       "extern int cudaRuntimeGetVersion(int *);\nint envbuild_global_deps(void) { int v; return cudaRuntimeGetVersion(&v); }\n",
       None, "-L%s" % linked.parent, "-l:libcudart.so.13", "-Wl,--disable-new-dtags",
       "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib")
    (cu13 / "libcudart.so.13").unlink()
    cc(cu13 / "libcudart.so.13", FULL_CUDART_SRC.replace("VCODE", "13000"), "CUDART_12")


def test_a_symbol_version_the_loader_lacks_sends_the_probe_to_loading(tmp_path):
    """Tracing, ld.so prints "version `CUDART_13' not found" and still exits 0; the real load fails on it, so the
    gate must not judge the trace: the probe loads (here: fails to load, then `import torch` fails) as the doctor."""
    site = tmp_path / "site"
    fake_torch(site)
    _versioned_cudart(site, tmp_path)
    full = run_probe(_env(site))
    gate = run_probe(_env(site), "--resolve-only")
    assert "version `CUDART_13' not found" in gate["torch"]["resolve_path"], gate["torch"]
    assert "CUDART_13" in full["torch"]["native_path"]
    assert gate["torch"]["present"] is full["torch"]["present"] is False


def test_the_c_extension_is_the_one_this_pythons_import_system_picks(tmp_path):
    """With `_C.abi3.so` beside `_C.cpython-3xx-....so`, sorted order would take abi3; the import system tries its
    EXTENSION_SUFFIXES in order, the interpreter's own tag first, so the trace must take that one."""
    site = tmp_path / "site"
    fake_torch(site)
    (site / "torch" / "_C.abi3.so").write_bytes(b"not the extension this python loads")
    gate = run_probe(_env(site), "--resolve-only")
    assert gate["init"]["source"] == LOADER_TRACE and "resolve_path" not in gate["torch"], gate["torch"]


CONSTANTS_SRC = r"""
unsigned long long envbuild_code(void) { return (2ULL << 32) | (28ULL << 16) | 9ULL; }
const char *envbuild_suffix(void) { return "+cuda13.0"; }
"""


def _constants(tmp_path, *flags):
    out = tmp_path / "libconstants.so"
    src = tmp_path / "constants.c"
    src.write_text(CONSTANTS_SRC)
    subprocess.run([need_gcc(), "-shared", "-fPIC", "-O2", "-o", str(out), str(src)] + list(flags), check=True,
                   capture_output=True)
    return out


def test_elf_reads_past_the_endbr64_of_a_cet_build(tmp_path):
    lib = _constants(tmp_path, "-fcf-protection=full")
    with open(lib, "rb") as fh:
        image = _elf._Image(fh)
        assert image.read(image.offset(image.symbol("envbuild_code")), 4) == b"\xf3\x0f\x1e\xfa"  # endbr64
    assert _elf.returned_integer(str(lib), "envbuild_code") == (2 << 32) | (28 << 16) | 9
    assert _elf.returned_string(str(lib), "envbuild_suffix") == "+cuda13.0"


def test_elf_answers_none_for_another_machine(tmp_path):
    """aarch64's code is not x86's: the same bytes must not be read as `movabs; ret`."""
    lib = _constants(tmp_path, "-fcf-protection=none")
    assert _elf.returned_integer(str(lib), "envbuild_code") is not None
    data = bytearray(lib.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    lib.write_bytes(bytes(data))
    assert _elf.returned_integer(str(lib), "envbuild_code") is None
    assert _elf.returned_string(str(lib), "envbuild_suffix") is None


def test_a_cuda_build_whose_nccl_the_file_does_not_tell_is_not_judged_from_the_trace(tmp_path, monkeypatch):
    """torch.nccl_version must not silently vanish from the gate's facts: the probe loads the library instead."""
    import importlib.machinery

    import _loader_trace
    from _torch_native import NativeUnavailable

    site = tmp_path / "site"
    fake_torch(site)
    spec = importlib.machinery.PathFinder.find_spec("torch", [str(site)])
    for key in [k for k in os.environ if k.startswith("LD_")]:
        monkeypatch.delenv(key)
    t, _ = _loader_trace.torch_facts(spec, lambda phase: None)
    assert t["nccl_version"] == "2.28.9"
    monkeypatch.setattr(_loader_trace, "built_nccl", lambda pkg_dir: None)
    with pytest.raises(NativeUnavailable, match="NCCL torch was built with"):
        _loader_trace.torch_facts(spec, lambda phase: None)


def test_any_fault_of_the_trace_falls_back_to_loading_with_the_reason(tmp_path, monkeypatch):
    """Not only NativeUnavailable: a bug in the trace must not leave the gate judging the probe's own maps (which hold
    no torch, so every stack check would skip and the gate pass)."""
    import importlib.machinery
    import importlib.util

    import _loader_trace
    import stack_probe

    def broken(spec, enter):
        raise KeyError("a fault of the trace")

    loaded = []

    def load_torch(result, errors, init_state, gate, spec):
        loaded.append(spec.name)
        result["torch"], result["init"] = {"present": True}, {"method": "loaded"}
        return True

    site = tmp_path / "site"
    fake_torch(site)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: importlib.machinery.PathFinder.find_spec(name, [str(site)]))
    monkeypatch.setattr(_loader_trace, "torch_facts", broken)
    monkeypatch.setattr(stack_probe, "load_torch", load_torch)
    result, errors = {}, {}
    assert stack_probe.probe_torch(result, errors, {}, lambda: None, resolve_only=True) is True
    assert loaded == ["torch"] and errors == {}
    assert result["torch"]["resolve_path"] == "not used: KeyError: 'a fault of the trace'"


def test_resolve_init_initialises_cuda_and_nccl_through_the_resolved_copies_without_loading_torch(tmp_path):
    """The static doctor's probe (`--resolve-init`): the trace's copies, then CUDA and a 1-rank NCCL group through the
    libcudart and libnccl it resolved, with the same facts as loading torch's libraries, while libtorch_cuda (and
    with it the bulk of a first run's reads from disk) is never loaded."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    loaded, traced = tmp_path / "loaded", tmp_path / "traced"
    full = run_probe(_env(site, FAKE_TORCH_LOADED=str(loaded)))
    fast = run_probe(_env(site, FAKE_TORCH_LOADED=str(traced)), "--resolve-init")
    assert fast["_rc"] == 0, fast["_stderr"]
    assert loaded.exists() and not traced.exists()
    assert _copies(fast) == _copies(full)
    t, init = fast["torch"], fast["init"]
    assert t["method"].startswith(LOADER_TRACE) and "resolve_path" not in t
    assert init["source"] == LOADER_TRACE and init["method"].startswith(RESOLVED_INIT)
    for key in ("cuda_available", "device_count", "nccl_version"):
        assert t[key] == full["torch"][key], key
    assert init["cuda_tensor"] is init["nccl_group"] is True
    assert init["nccl_banner_version"] == full["init"]["nccl_banner_version"] == "2.28.9"
    assert fast["cuda_runtime"] == full["cuda_runtime"]
    # CUDA and NCCL were initialised beside the trace, in a child on the copies the trace then resolved
    assert set(init["beside_trace_s"]) >= {"torch.cuda.is_available", "cuda tensor", "nccl process group"}
    # read beside CUDA's and NCCL's initialisation, the copies' versions are all in before the probe answers
    assert _versions(fast) == _versions(full)
    assert [m.get("api_version") for m in fast["mapped"] if m["family"] == "libcudart"] == ["13.0"]


def test_resolve_init_runs_the_preloaded_libnccl_as_torch_would(tmp_path):
    """With another libnccl in LD_PRELOAD, NCCL's calls bind to it first (its banner), as under torch."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    other = full_nccl(tmp_path / "other", "2.28.3")
    full = run_probe(_env(site, LD_PRELOAD=str(other)))
    fast = run_probe(_env(site, LD_PRELOAD=str(other)), "--resolve-init")
    assert _copies(fast) == _copies(full)
    assert fast["init"]["nccl_banner_version"] == full["init"]["nccl_banner_version"] == "2.28.3"
    # the child beside the trace mapped the preloaded copy and the wheel's, as the trace resolved (its maps list them
    # in address order, the trace in its own): its answer is taken
    assert set(fast["init"]["beside_trace_s"]) >= {"torch.cuda.is_available", "nccl process group"}, fast["init"]
    assert _none_left(tmp_path)


def test_a_libnccl_the_trace_resolves_elsewhere_stops_the_init_beside_the_trace_at_once(tmp_path):
    """libtorch_cuda's RPATH names another directory before the wheel's: the trace resolves that libnccl (2.27.3), not
    the wheel's the child was given. The child cannot stand for the probe, so it is stopped right after the trace,
    without waiting for its init (here the wheel's libnccl would take 20 s in ncclGetUniqueId), and the banner is
    the resolved copy's, as when torch's libraries are loaded."""
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    other = full_nccl(elsewhere, "2.27.3")
    fake_torch(site, nccl_first=elsewhere)
    slow = FULL_NCCL_SRC.replace("int ncclGetUniqueId(ncclUniqueId *id) {",
                                 "int ncclGetUniqueId(ncclUniqueId *id) { sleep(20);")
    build_lib(site / "nvidia" / "nccl" / "lib", "libnccl.so.2", "libnccl.so.2", slow,
              {"VSTR": '"2.28.9+cuda13.0"', "VCODE": "22809"})
    full = run_probe(_env(site))
    t0 = time.monotonic()
    fast = run_probe(_env(site), "--resolve-init", "--init-timeout", "60")
    assert time.monotonic() - t0 < 10, "the probe waited for the child's init"
    assert fast["_rc"] == 0, fast["_stderr"]
    assert [p for f, p in _copies(fast) if f == "libnccl"] == [str(other)]
    assert "beside_trace_s" not in fast["init"]
    assert fast["init"]["nccl_banner_version"] == full["init"]["nccl_banner_version"] == "2.27.3"
    assert _none_left(tmp_path)


def test_resolve_init_reports_cudas_refusal_as_a_finding_not_a_fallback(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    traced = tmp_path / "traced"
    fast = run_probe(_env(site, FAKE_CUDA_MALLOC_RC="2", FAKE_TORCH_LOADED=str(traced)), "--resolve-init")
    assert fast["errors"]["init"] == ("InitError during cuda tensor: cudaMalloc: Error 2 cudaErrorMemoryAllocation: "
                                      "out of memory")
    assert not traced.exists() and "resolve_path" not in fast["torch"]
    assert "beside_trace_s" in fast["init"]  # the child's refusal, as the probe's own path words it
    own = _in_process_probe(_env(site, FAKE_CUDA_MALLOC_RC="2"), "--resolve-init")
    assert fast["errors"]["init"] == own["errors"]["init"]
    assert fast["torch"] == own["torch"]


def test_a_copy_the_init_beside_the_trace_cannot_load_is_the_probes_own_path_to_tell(tmp_path):
    """A libnccl lacking ncclAllReduce fails the child before any CUDA call: not a finding of CUDA or NCCL, so the
    probe's own path tells, as without the child (NativeUnavailable: torch's libraries loaded, then `import torch`)."""
    site = tmp_path / "site"
    fake_torch(site)
    build_lib(site / "nvidia" / "nccl" / "lib", "libnccl.so.2", "libnccl.so.2",
              FULL_NCCL_SRC.replace("int ncclAllReduce(", "int envbuild_not_all_reduce("),
              {"VSTR": '"2.28.9+cuda13.0"', "VCODE": "22809"})
    fast = run_probe(_env(site), "--resolve-init")
    own = _in_process_probe(_env(site), "--resolve-init")
    assert fast["torch"]["resolve_path"] == "not used: ncclAllReduce is not defined by torch's libraries"
    assert fast["torch"] == own["torch"]
    assert fast["errors"].get("init") == own["errors"].get("init")
    assert fast["init"] == own["init"]


def test_the_static_doctor_probes_with_resolve_init_and_quick_loads(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    proc, results = run_doctor(["--check", "stack.torch"], _env(site), tmp_path)
    init = results["stack.torch"]["evidence"]["init"]
    assert results["stack.torch"]["status"] == "pass", results["stack.torch"]
    assert init["method"].startswith(RESOLVED_INIT), init
    proc, results = run_doctor(["--check", "stack.torch", "--quick"], _env(site), tmp_path)
    assert "no `import torch`" in results["stack.torch"]["evidence"]["init"]["method"]


def test_loader_tables_point_at_the_librarys_own_string_and_version_tables(tmp_path):
    """What the read-ahead asks the kernel for must be where the loader reads: the dynamic string table holds the
    library's needed sonames, and every range lies inside the file."""
    site = tmp_path / "site"
    fake_torch(site)
    lib = site / "torch" / "lib" / "libtorch_cuda.so"
    tables = _elf.loader_tables(str(lib))
    data = lib.read_bytes()
    assert tables and all(0 <= offset < len(data) for offset, _ in tables)
    strtab = data[tables[0][0]:tables[0][0] + tables[0][1]]
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    sonames = [line.split("[", 1)[1].rstrip("]") for line in needed.splitlines() if "(NEEDED)" in line]
    assert sonames and all(s.encode() + b"\0" in strtab for s in sonames)
    with pytest.raises(ValueError):
        _elf.loader_tables(str(site / "torch" / "version.py"))


def test_the_read_ahead_runs_beside_the_trace_and_leaves_no_process(tmp_path):
    """The trace's answer is the same with its read-ahead process, which is reaped before the probe answers: a
    probe leaving a child behind would be a stray for the launcher to report."""
    import _loader_trace

    site = tmp_path / "site"
    fake_torch(site)
    libs = _loader_trace.torch_libraries(str(site / "torch"))
    assert str((site / "torch" / "lib" / "libtorch_cuda.so").resolve()) in libs
    fifo = tmp_path / "blocks"  # opening a FIFO with no writer blocks: a read-ahead the trace outlasts
    os.mkfifo(fifo)
    proc = _loader_trace.start_read_ahead([str(fifo)] + libs)
    assert proc is not None
    time.sleep(0.5)
    _loader_trace.stop_read_ahead(proc)
    assert proc.returncode == -signal.SIGKILL  # stopped by the trace's end, and reaped
    gate = run_probe(_env(site), "--resolve-only")
    assert gate["_rc"] == 0, gate["_stderr"]
    assert [m["family"] for m in gate["mapped"]].count("libnccl") == 1
    assert _none_left(tmp_path, "_read_ahead.py", within_s=0)


def test_a_wedged_init_beside_the_trace_is_named_by_the_watchdog_and_its_child_stopped(tmp_path):
    """cuInit that never returns in the child beside the trace: the probe's watchdog answers at its timeout, in the
    phase it waited in, with the copies the trace resolved (the driver included) and their versions; the probe never
    starts a second init of its own on that GPU, and the child is stopped with it."""
    site = tmp_path / "site"
    fake_torch(site)
    driver = fake_libcuda(tmp_path / "driver")
    calls = tmp_path / "cuda-calls"
    env = _env(site, LD_LIBRARY_PATH=str(driver.parent))
    gate = run_probe(env, "--resolve-only")
    t0 = time.monotonic()
    fast, pid = _probe(dict(env, FAKE_CUDA_COUNT_SLEEP="60", FAKE_CUDA_CALLS=str(calls)), "--resolve-init",
                       "--init-timeout", "3")
    assert time.monotonic() - t0 < 30
    assert fast["_rc"] == 3
    assert fast["errors"]["init"] == ("CUDA/NCCL initialisation did not finish within 3 s "
                                      "(hung in: init beside the trace, in its phase torch.cuda.is_available)"), \
        fast["errors"]
    assert _versions(fast) == _versions(gate)
    assert ("libcuda", str(driver)) in _copies(fast)
    assert _none_left(tmp_path)
    callers = _cuda_callers(calls)
    assert len(callers) == 1 and pid not in callers, callers  # the child's cuInit only


def test_a_wedged_init_of_the_probes_own_after_the_trace_keeps_the_traces_copies(tmp_path):
    """The trace resolves another libnccl than the wheel's the child was given, so the child is stopped and the probe
    initialises itself, and its own cuInit never returns: the watchdog's answer still names the copies the trace
    resolved (the driver the runtime would open included, which the probe never mapped) with their versions, not
    only what the probe's own maps held at that moment."""
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    other = full_nccl(elsewhere, "2.27.3")
    fake_torch(site, nccl_first=elsewhere)
    driver = fake_libcuda(tmp_path / "driver")
    calls = tmp_path / "cuda-calls"
    env = _env(site, LD_LIBRARY_PATH=str(driver.parent))
    gate = run_probe(env, "--resolve-only")
    fast, pid = _probe(dict(env, FAKE_CUDA_COUNT_SLEEP="60", FAKE_CUDA_CALLS=str(calls)), "--resolve-init",
                       "--init-timeout", "3")
    assert fast["_rc"] == 3
    assert fast["errors"]["init"] == ("CUDA/NCCL initialisation did not finish within 3 s "
                                      "(hung in: torch.cuda.is_available)"), fast["errors"]
    assert pid in _cuda_callers(calls)  # the probe's own cuInit, after the child was stopped
    assert ("libcuda", str(driver)) in _copies(fast) and ("libnccl", str(other)) in _copies(fast)
    assert _versions(fast) == _versions(gate)
    assert _none_left(tmp_path)


def test_a_probe_killed_mid_wedge_takes_its_init_beside_the_trace_with_it(tmp_path):
    """SIGKILL the probe while the child is wedged in cuInit: the child dies with it (no process under PID 1 for
    anyone to find) and nothing of it is left in the temporary directory."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    fake_torch(site)
    tmp.mkdir()
    calls = tmp_path / "cuda-calls"
    env = _env(site, FAKE_CUDA_COUNT_SLEEP="60", FAKE_CUDA_CALLS=str(calls), TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, str(PROBE), "--resolve-init", "--init-timeout", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while not _cuda_callers(calls) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cuda_callers(calls) and _started(tmp_path), "the child never reached its cuInit"
        proc.kill()
        proc.wait()
        assert _none_left(tmp_path, within_s=1.0)
        assert [p.name for p in tmp.iterdir() if "early-init" in p.name] == []
    finally:
        proc.kill()
        proc.wait()
        for pid in _children(tmp_path):  # what a failing run left
            os.kill(pid, signal.SIGKILL)


def _banner_dirs(tmp):
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("envbuild-stackprobe-nccl-"))


@pytest.mark.parametrize("beside", [True, False], ids=["beside-the-trace", "in-process"])
def test_a_banner_directory_left_by_a_kill_in_the_nccl_init_is_swept_by_the_next_probe(tmp_path, beside):
    """SIGKILL the probe while NCCL's init holds NcclBanner's directory (in the child beside the trace, which dies
    with the probe, or in the probe's own init): the directory cannot be removed by its process, and the next probe
    removes it once it is old (its owner is gone), never one whose owner runs, nor a young one whose owner's pid
    does not run here (a probe in another pid namespace sharing the directory)."""
    site, tmp = tmp_path / "site", tmp_path / "tmp"
    fake_torch(site)
    tmp.mkdir()
    live = tmp / ("envbuild-stackprobe-nccl-%d-live" % os.getpid())
    live.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    young = tmp / ("envbuild-stackprobe-nccl-%d-young" % gone.pid)
    env = _env(site, TMPDIR=str(tmp))
    code = ["-c", IN_PROCESS, str(PROBE.parent)] if not beside else [str(PROBE)]
    proc = subprocess.Popen([sys.executable] + code + ["--resolve-init", "--init-timeout", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(env, FAKE_NCCL_INIT_SLEEP="60"))
    try:
        deadline = time.monotonic() + 30
        while len(_banner_dirs(tmp)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        assert _none_left(tmp_path, within_s=5.0)
        left = [name for name in _banner_dirs(tmp) if name != live.name]
        assert len(left) == 1, "NCCL's init never started"
        an_hour_ago = time.time() - 3600
        os.utime(tmp / left[0], (an_hour_ago, an_hour_ago))
        young.mkdir()
    finally:
        proc.kill()
        proc.wait()
        for pid in _children(tmp_path):  # what a failing run left
            os.kill(pid, signal.SIGKILL)
    data = run_probe(env, "--resolve-init")
    assert data["_rc"] == 0 and data["init"]["nccl_group"] is True, data["_stderr"]
    assert _banner_dirs(tmp) == sorted([live.name, young.name])


def test_a_slow_init_beside_the_trace_is_awaited_under_the_probes_own_timeout(tmp_path):
    """The wait for the child is bounded by --init-timeout alone (its watchdog answers a hang): an init slower than
    any other bound (here 3 s, with a former separate bound set to 1 s) is adopted, not done again in the probe."""
    site = tmp_path / "site"
    fake_torch(site)
    calls = tmp_path / "cuda-calls"
    code = IN_PROCESS.replace("stack_probe.start_early_init = lambda spec, gate_path: None",
                              "stack_probe.INIT_BESIDE_TIMEOUT_S = 1.0")
    proc = subprocess.Popen([sys.executable, "-c", code, str(PROBE.parent), "--resolve-init", "--init-timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(site, FAKE_CUDA_COUNT_SLEEP="3", FAKE_CUDA_CALLS=str(calls)))
    out, err = proc.communicate(timeout=60)
    fast = json.loads(out)
    assert proc.returncode == 0 and "init" not in fast["errors"], (fast["errors"], err[-2000:])
    assert fast["init"]["beside_trace_s"]["torch.cuda.is_available"] >= 3
    assert proc.pid not in _cuda_callers(calls) and len(_cuda_callers(calls)) == 1


def test_stopping_a_child_is_idempotent_across_threads(tmp_path, monkeypatch):
    """The watchdog's thread and the main thread may stop the same child at once: neither fails."""
    import _early_init

    class SlowList(list):  # widens the window between a membership test and the removal
        def __contains__(self, item):
            found = list.__contains__(self, item)
            time.sleep(0.05)
            return found

    site = tmp_path / "site"
    fake_torch(site)
    monkeypatch.setattr(_early_init, "RUNNING", SlowList())
    child = _early_init.start(str(site / "torch"), "13.0", str(tmp_path / "never"))
    assert child is not None and _started(tmp_path)
    failures = []

    def stop():
        try:
            child.stop()
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=stop) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and not _early_init.RUNNING
    assert _none_left(tmp_path)
