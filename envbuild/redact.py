"""Secrets out of everything `envbuild capture --node` writes: a bundle travels to other people.

Two rules:

- environment variables are an allowlist: only variables known to matter to the checks and to be harmless
  keep their values (NCCL_*, CUDA_*, PYTORCH_*, TMS_*, library paths, ...); every other one keeps its name
  (checks judge names) with the value "<redacted>". A denylist of secret-looking names missed API keys
  called `OPENAI_KEY` or `DATABASE_URL`;
- every captured text (node files, command outputs, stack facts, the capture's argv, its report) is
  scrubbed of credential forms wherever they appear: passwords in URLs (`postgres://u:SECRET@host`), GitHub,
  GitLab, Hugging Face, Slack and OpenAI-style tokens, AWS access keys and secrets, bearer/basic
  authorization values, JWTs, private key blocks, and `--password=`-style arguments.
"""
from __future__ import annotations

import re
from typing import Any, Dict

REDACTED = "<redacted>"

# names whose values are kept (checks read them; they hold paths, numbers, switches)
_KEEP_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "TORCH_CUDA_", "TORCHINDUCTOR_",
                  "TMS_", "SGLANG_", "NVIDIA_", "NVTE_", "CUBLAS_", "CUDNN_", "CUBLASLT_", "GLOO_", "UCX_", "NV_",
                  "OMPI_MCA_", "LC_", "ENVBUILD_")
_KEEP_NAMES = frozenset({
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHONPATH", "PYTHONHOME", "CUDA_HOME", "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV", "CONDA_EXE", "VIRTUAL_ENV", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TZ",
    "HOSTNAME", "PWD", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MAX_JOBS", "MASTER_ADDR", "MASTER_PORT",
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "SLURM_JOB_ID", "SLURM_PROCID",
    "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "XDG_RUNTIME_DIR", "TMPDIR",
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
})

# (pattern, replacement): applied in order to every captured text
_SCRUB = [
    # private key blocks
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     "-----BEGIN PRIVATE KEY-----" + REDACTED + "-----END PRIVATE KEY-----"),
    # scheme://user:password@host  ->  scheme://user:<redacted>@host (also a bare token: scheme://token@host)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s:@\0\"'<>]*):([^/\s@\0\"'<>]+)@"), r"\1\2:" + REDACTED + "@"),
    (re.compile(r"(?i)\b(https?://)([A-Za-z0-9_\-]{20,})@"), r"\1" + REDACTED + "@"),
    # vendor tokens
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{16,}\b"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}\b"), REDACTED),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}\b"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), REDACTED),
    # authorization headers and bearer tokens
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token)?\s*[^\s\0\"',;]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)\b(bearer|token)\s+[A-Za-z0-9_\-.=+/]{16,}"), r"\1 " + REDACTED),
    # key=value / --key value / "key": "value" with a secret-looking key
    (re.compile(r"(?i)(\b[\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
                r"credentials?)[\w.-]*[\"']?\s*[=:]\s*[\"']?)(?!<redacted>)([^\s\0\"',;&]+)"), r"\1" + REDACTED),
    # .netrc / ftp style: `password WORD`
    (re.compile(r"(?i)(\b(?:password|passwd)\s+)(?!<redacted>)([^\s\0\"',;&]+)"), r"\1" + REDACTED),
    (re.compile(r"(?i)(--[\w-]*(?:password|passwd|secret|token|api-?key)[\w-]*[\0 ])(?!<redacted>)([^\s\0]+)"),
     r"\1" + REDACTED),
]


def scrub_text(text: str) -> str:
    """`text` with every credential form of the module doc replaced by <redacted>."""
    for pattern, repl in _SCRUB:
        text = pattern.sub(repl, text)
    return text


def keeps_value(name: str) -> bool:
    """Is `name` an environment variable whose value a bundle may keep?"""
    return name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES)


def redact_env_value(name: str, value: str) -> str:
    return scrub_text(value) if keeps_value(name) else REDACTED


def redact_env(env: Dict[str, str]) -> Dict[str, str]:
    """An environment dict by the allowlist rule (names kept, values only of allowlisted names, scrubbed)."""
    return {k: redact_env_value(k, v) if isinstance(v, str) else v for k, v in env.items()}


def redact_environ(text: str) -> str:
    """A /proc/<pid>/environ text (NUL-separated NAME=value) by the allowlist rule."""
    out = []
    for item in text.split("\0"):
        name, sep, value = item.partition("=")
        out.append(f"{name}={redact_env_value(name, value)}" if sep else scrub_text(item))
    return "\0".join(out)


def scrub_json(data: Any) -> Any:
    """Every string in a JSON-like value scrubbed; dicts named `env`/`environ` by the allowlist rule."""
    if isinstance(data, str):
        return scrub_text(data)
    if isinstance(data, list):
        return [scrub_json(v) for v in data]
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if k in ("env", "environ", "launch_env") and isinstance(v, dict):
                out[k] = {ek: (redact_env_value(ek, ev) if isinstance(ev, str) else scrub_json(ev))
                          for ek, ev in v.items()}
            else:
                out[k] = scrub_json(v)
        return out
    return data


def url_without_credentials(url: str) -> str:
    """`url` without user:password@ (credentials never go into a lock file or a message)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
