"""Secrets out of everything `envbuild capture --node` writes: a bundle travels to other people.

Three rules:

- environment variables are an allowlist: only variables known to matter to the checks and to be harmless
  keep their values (NCCL_*, CUDA_*, PYTORCH_*, TMS_*, library paths, ...); every other one keeps its name
  (checks judge names) with the value "<redacted>". A denylist of secret-looking names missed API keys
  called `OPENAI_KEY` or `DATABASE_URL`. Inside the allowlist the name and the value are judged too: a name
  with a KEY/SECRET/TOKEN/PASSWORD/... word (NVIDIA_API_KEY, SGLANG_API_KEY) or a value that is one long
  high-entropy word (what a generated key looks like; paths, numbers and switches are not) is redacted;
- every captured text (node files, command outputs, stack facts, the capture's argv, its report) is
  scrubbed of credential forms wherever they appear: the vendor patterns of Yelp's detect-secrets (its
  regex plugins: AWS, Azure storage account keys, GitHub, GitLab, PyPI, npm, Slack, Stripe, SendGrid, Twilio,
  JWTs, private keys, IBM, Artifactory, ...; maintained upstream as vendors add token formats), plus the
  forms it leaves to its keyword/entropy heuristics, which cannot be used on free text: passwords in URLs and
  in mount sources (`postgres://u:SECRET@host`, `alice:SECRET@nas:/export`), bearer/basic authorization
  values, `--password=`-style arguments and `key: value` pairs with a secret-looking key, database command
  lines (`mysql -pSECRET`, `redis-cli -a SECRET`, `sshpass -p SECRET`), and prefixed vendor keys it lacks
  (NVIDIA `nvapi-`, Google `AIza`, Hugging Face `hf_`, OpenAI/Anthropic `sk-`, HashiCorp Vault, Databricks,
  DigitalOcean, standalone npm tokens, Azure SAS signatures).
"""
from __future__ import annotations

import math
import re
import sys
from functools import lru_cache
from typing import Any, Dict, List, Tuple

REDACTED = "<redacted>"

# names whose values are kept (checks read them; they hold paths, numbers, switches)
_KEEP_PREFIXES = ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_SYMM_MEM_", "TORCH_CUDA_", "TORCHINDUCTOR_",
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

# The steering variables whose values a report may show (the actor audit, stack.env_policy): switches, algorithm
# names, interface and HCA names, library paths. Any other NCCL_*/CUDA_*/... value is shown as <redacted>
# (NCCL_IB_* may hold host names, a site may keep a secret under the prefix).
VALUE_ALLOWLIST = frozenset({
    "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL",
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
    "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL", "NCCL_BUFFSIZE", "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_MNNVL_ENABLE", "NCCL_LAUNCH_MODE",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_HOME", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK",
    "TMS_INIT_ENABLE", "TMS_INIT_ENABLE_CPU_BACKUP", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "SGLANG_MEMORY_SAVER_CUDA_GRAPH", "NVTE_FP8_BLOCK_SCALING_FP32_SCALES",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
})

# (pattern, replacement): applied in order to every captured text
_SCRUB = [
    # private key blocks
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     "-----BEGIN PRIVATE KEY-----" + REDACTED + "-----END PRIVATE KEY-----"),
    # scheme://user:password@host  ->  scheme://user:<redacted>@host (also a bare token: scheme://token@host)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s:@\0\"'<>]*):([^/\s@\0\"'<>]+)@"), r"\1\2:" + REDACTED + "@"),
    (re.compile(r"(?i)\b(https?://)([A-Za-z0-9_\-]{20,})@"), r"\1" + REDACTED + "@"),
    # user:password@host in a mount source (sshfs, davfs, an fstab line) or any other scheme-less place
    (re.compile(r"(?<![\w/:@.-])([A-Za-z0-9._-]+):(?!<redacted>)([^\s@:/\0\"'<>]+)@(?=[A-Za-z0-9.\[-])"),
     r"\1:" + REDACTED + "@"),
    # database and remote-shell command lines: the password as an option value glued to the flag or after it
    (re.compile(r"(\bmysql(?:dump|admin|import|sh)?\b[^\n\0]*?[\s\0]-p)(?!<redacted>)([^\s\0]+)"), r"\1" + REDACTED),
    (re.compile(r"(\b(?:redis-cli|sshpass)\b[^\n\0]*?[\s\0]-[ap][\s\0]+)(?!<redacted>)([^\s\0]+)"), r"\1" + REDACTED),
    # vendor tokens detect-secrets has no plugin for
    (re.compile(r"\bnvapi-[A-Za-z0-9_\-]{20,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), REDACTED),
    (re.compile(r"\bhv[sbr]\.[A-Za-z0-9_\-]{20,}"), REDACTED),
    (re.compile(r"\bdapi[0-9a-f]{32}\b"), REDACTED),
    (re.compile(r"\bdo[por]_v1_[0-9a-f]{64}\b"), REDACTED),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), REDACTED),
    (re.compile(r"\bpypi-[A-Za-z0-9_\-]{50,}"), REDACTED),
    (re.compile(r"([?&]sig=)(?!<redacted>)[A-Za-z0-9%+/=]{20,}"), r"\1" + REDACTED),
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


# words of a variable name that say its value is a credential, whatever its prefix
_SECRET_WORDS = frozenset({"KEY", "KEYS", "APIKEY", "SECRET", "SECRETS", "TOKEN", "TOKENS", "PASSWORD", "PASSWD",
                           "PASS", "PASSPHRASE", "PW", "CREDENTIAL", "CREDENTIALS", "CRED", "CREDS", "AUTH", "COOKIE",
                           "PRIVATE", "SIGNATURE", "SESSION"})
_SECRET_TAILS = ("APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD")
_OWN_PLUGINS_SKIPPED = ("IPPublicDetector",)  # an address is a fact the checks need, not a secret


@lru_cache(maxsize=1)
def _vendor_detectors() -> Tuple[Any, ...]:
    """detect-secrets' regex-based plugins (loaded once, lazily). Without them nothing is written: a text
    that was not scrubbed must not leave the machine, so a missing package is one clear error."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError as exc:
        from envbuild.errors import EnvbuildError

        raise EnvbuildError(f"detect-secrets, which envbuild needs to scrub secrets, does not import in "
                            f"{sys.executable} ({exc}); install envbuild's dependencies "
                            f"(pip install 'detect-secrets>=1.5,<2')") from exc

    return tuple(cls() for cls in get_mapping_from_secret_type_to_class().values()
                 if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _OWN_PLUGINS_SKIPPED)


# plugins whose patterns are `<vendor> <secret word> = value`: only lines with a secret word can match, and these
# patterns are the slow ones (a third of a second per MB each), so they read only those lines
_ASSIGNMENT_PLUGINS = ("CloudantDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "SoftlayerDetector")
_SECRET_WORD_LINE = re.compile(r"(?im)^.*(?:key|pw|pass|secret|token|api|hmac).*$")


def _vendor_secrets(text: str) -> List[str]:
    found = set()
    worded = None
    for plugin in _vendor_detectors():
        if type(plugin).__name__ in _ASSIGNMENT_PLUGINS:
            worded = "\n".join(_SECRET_WORD_LINE.findall(text)) if worded is None else worded
        for secret in plugin.analyze_string(worded if type(plugin).__name__ in _ASSIGNMENT_PLUGINS else text):
            secret = secret.lstrip(" \t\r\n\0=:\"'").rstrip(" \t\r\n\0\"'")  # some take the delimiters around
            if len(secret) >= 8 and secret != REDACTED:
                found.add(secret)
    return sorted(found, key=len, reverse=True)  # longest first: a key inside a longer one goes with it


def scrub_text(text: str) -> str:
    """`text` with every credential form of the module doc replaced by <redacted>."""
    for pattern, repl in _SCRUB:
        text = pattern.sub(repl, text)
    for secret in _vendor_secrets(text):
        text = text.replace(secret, REDACTED)
    return text


def secret_name(name: str) -> bool:
    """Does the variable's name say it holds a credential (NVIDIA_API_KEY, NCCL_SHARP_SECRET, HF_TOKEN)?"""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name.upper()) if w]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_TAILS) for w in words)


def _entropy(value: str) -> float:
    counts: Dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def secret_value(value: str) -> bool:
    """Does the value look like a generated key: one word of 20+ letters, digits and base64 signs, mixing them,
    with the character entropy detect-secrets uses for base64 (4.5 bits) or hex (3.0)? Paths, lists, numbers,
    switches and host:port values are not."""
    if len(value) < 20 or re.search(r"[\s/:,;.@]", value) or not re.fullmatch(r"[A-Za-z0-9+=_\-]+", value):
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", value):
        return _entropy(value) > 3.0
    mixed = re.search(r"[0-9]", value) and re.search(r"[a-z]", value) and re.search(r"[A-Z]", value)
    return bool(mixed) and _entropy(value) > 4.0


def keeps_value(name: str) -> bool:
    """Is `name` an environment variable whose value a bundle may keep?"""
    return (name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES)) and not secret_name(name)


def redact_env_value(name: str, value: str) -> str:
    if not keeps_value(name) or secret_value(value):
        return REDACTED
    return scrub_text(value)


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
