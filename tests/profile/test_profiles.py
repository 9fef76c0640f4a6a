"""Profiles of the reference images: the shipped ones load and carry the image's pins with their sources;
a bad profile is refused with file, line and field; an unknown one lists the known ones (exit 2)."""
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.profile import load_profile, load_profile_file, profile_names

REPO = Path(__file__).resolve().parent.parent.parent
SHIPPED = ("slime-v0.2.2-cu129", "slime-v0.3.1-cu129", "slime-v0.3.1-cu130")
GOOD = (REPO / "lockfiles" / "slime-v0.3.1-cu129" / "profile.toml").read_text()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "envbuild"] + list(args), capture_output=True, text=True,
                          cwd=str(REPO), env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}, timeout=60)


def test_shipped_profiles_load_with_every_fact_sourced():
    assert set(SHIPPED) <= set(profile_names())
    for name in SHIPPED:
        p = load_profile(name)
        for comp in ("cuda", "python", "torch", "nccl", "cudnn", "sglang", "megatron", "transformer_engine",
                     "torch_memory_saver", "apex", "numpy"):
            assert comp in p.components, (name, comp)
        for c in p.components.values():
            assert c.source and ("slime" in c.source or "torch" in c.source or "sglang" in c.source or "captured" in c.source), (name, c.name)
            assert c.verified is False  # none was read from an image yet
        assert p.components["sglang"].commit and p.components["megatron"].commit
        assert p.components["apex"].commit == "10417ace"
        env = p.launch_env
        assert (env["NCCL_CUMEM_ENABLE"].value, env["NCCL_CUMEM_ENABLE"].scope) == ("0", "train")
        assert env["CUDA_DEVICE_MAX_CONNECTIONS"].value == "1" and env["NCCL_NVLS_ENABLE"].value == "0"
        d = p.docker_run
        assert (d.shm_size_bytes, d.memlock, d.stack_bytes, d.ipc) == (16 * 2**30, "unlimited", 64 * 2**20, "host")
        for patch in p.patches:
            assert patch["target"] in ("sglang", "megatron") and patch["verified"] is False


def test_current_image_pins_match_the_issue():
    p = load_profile("slime-v0.3.1-cu129")
    c = p.components
    assert (p.cuda, p.python) == ("12.9.1", "3.12")
    assert c["torch"].version == "2.11.0+cu129" and c["nccl"].version == "2.28.9"
    assert c["cudnn"].version == "9.19.0.56"
    assert (c["sglang"].version, c["sglang"].commit) == ("0.5.15.post1", "0b3bb0cb")
    assert c["megatron"].commit == "1dcf0daf" and c["transformer_engine"].version == "2.16.1"
    assert c["flash_attn"].version == "2.8.3" and c["torch_memory_saver"].commit == "8d30c59c"
    old = load_profile("slime-v0.2.2-cu129").components
    assert old["torch"].version == "2.9.1+cu129" and old["nccl"].version == "2.28.3"
    assert old["cudnn"].version == "9.16.0.29" and "2.27.5" in old["nccl"].source
    cu13 = load_profile("slime-v0.3.1-cu130")
    assert cu13.cuda_major == 13 and cu13.components["torch"].version == "2.11.0+cu130"
    assert cu13.components["nccl"].pip_name == "nvidia-nccl-cu13"
    assert not [n for n, comp in cu13.components.items() if (comp.pip_name or "").endswith("-cu12")]


def test_profiles_command_lists_and_shows():
    proc = cli("profiles")
    assert proc.returncode == 0, proc.stderr
    for name in SHIPPED:
        assert name in proc.stdout
    proc = cli("profiles", "show", "slime-v0.3.1-cu129")
    assert proc.returncode == 0
    assert "0b3bb0cb" in proc.stdout and "NCCL_CUMEM_ENABLE" in proc.stdout and "docker run" in proc.stdout


def test_unknown_profile_lists_known_ones_exit_2():
    proc = cli("doctor", "--profile", "slime-v9")
    assert proc.returncode == 2
    assert "unknown profile 'slime-v9'" in proc.stderr
    for name in SHIPPED:
        assert name in proc.stderr
    with pytest.raises(EnvbuildError):
        load_profile("nope")


def write(tmp_path, text, folder="slime-v0.3.1-cu129"):
    path = tmp_path / folder / "profile.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def line_of(text, needle):
    return next(i + 1 for i, line in enumerate(text.splitlines()) if needle in line)


def test_malformed_toml_names_file_and_line(tmp_path):
    bad = GOOD.replace('version = "2.28.9"', 'version = "2.28.9', 1)
    path = write(tmp_path, bad)
    with pytest.raises(InputFileError) as exc:
        load_profile_file(path)
    assert exc.value.line == line_of(bad, 'version = "2.28.9')
    assert str(exc.value).startswith(f"{path}:{exc.value.line}: malformed TOML")
    proc = cli("profiles", "show", str(path))
    assert proc.returncode == 2 and f"{path}:{exc.value.line}:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("old,new,needle,field", [
    ('version = "2.11.0+cu129"\npip_name = "torch"', 'version = 2.11\npip_name = "torch"', "version = 2.11",
     "[components.torch] version: expected str"),
    ('value = "0"\nscope = "train"', 'value = 0\nscope = "train"', "value = 0",
     "[launch_env.NCCL_CUMEM_ENABLE] value: expected str"),
    ("stack_bytes = 67108864", 'stack_bytes = "64m"', 'stack_bytes = "64m"', "[docker_run] stack_bytes: expected int"),
    ('verified = false\nseverity = "fail"\nwhy = "the torch build',
     'verifed = false\nseverity = "fail"\nwhy = "the torch build', "verifed = false",
     "[components.torch] verifed: unknown field"),
    ('severity = "warn"\nwhy = "a cuDNN', 'severity = "fatal"\nwhy = "a cuDNN', 'severity = "fatal"',
     "[components.cudnn] severity: 'fatal' is not one of fail, warn, info"),
    ('commit = "1dcf0daf"', 'commit = "main"', 'commit = "main"', "[components.megatron] commit: 'main' is not a hex"),
    ('scope = "all"\nsource = "slime example scripts set NCCL_NVLS', 'scope = "everyone"\nsource = "slime example scripts set NCCL_NVLS',
     'scope = "everyone"', "[launch_env.NCCL_NVLS_ENABLE] scope"),
    ('python = "3.12"\n\n[components.cuda]', 'python = "py3"\n\n[components.cuda]', 'python = "py3"',
     "[profile] python: 'py3' is not a Python version"),
    ('target = "sglang"\nfile = "docker/patch/v0.5.15.post1/sglang-mrope.patch"',
     'target = "vllm"\nfile = "docker/patch/v0.5.15.post1/sglang-mrope.patch"', 'target = "vllm"',
     "[[patches]] #4 target: 'vllm' is not a component"),
])
def test_wrong_field_names_file_line_and_field(tmp_path, old, new, needle, field):
    assert old in GOOD, old
    text = GOOD.replace(old, new, 1)
    path = write(tmp_path, text)
    with pytest.raises(InputFileError) as exc:
        load_profile_file(path)
    assert str(exc.value).startswith(f"{path}:{line_of(text, needle)}: {field}"), str(exc.value)


def test_unknown_table_and_missing_fields(tmp_path):
    text = GOOD + '\n[lanuch_env.X]\nvalue = "1"\n'
    path = write(tmp_path, text)
    with pytest.raises(InputFileError) as exc:
        load_profile_file(path)
    assert exc.value.line == line_of(text, "[lanuch_env.X]") and "unknown field" in str(exc.value)
    text = GOOD.replace('source = "torch 2.11 pins nvidia-nccl 2.28.9', 'notes = "torch 2.11 pins nvidia-nccl 2.28.9', 1)
    path = write(tmp_path, text)
    with pytest.raises(InputFileError) as exc:
        load_profile_file(path)
    assert "[components.nccl]: missing required field 'source'" in str(exc.value)
    path = write(tmp_path, GOOD, folder="other-name")
    with pytest.raises(InputFileError) as exc:
        load_profile_file(path)
    assert "differs from its folder 'other-name'" in str(exc.value)
