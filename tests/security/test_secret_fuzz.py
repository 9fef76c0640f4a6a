"""Generated secrets (hypothesis, derandomized) in the places a capture copies: an environment entry under an
allowlisted prefix with a credential word in its name, a generated key as an allowlisted variable's value, a mount
source with user:password@, and each vendor key form embedded in arbitrary surrounding text. None survives."""
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.redact import REDACTED, redact_environ, scrub_text

FUZZ = dict(derandomize=True, deadline=None, database=None)
ALNUM = string.ascii_letters + string.digits
PREFIXES = ["NCCL_", "CUDA_", "PYTORCH_", "TMS_", "SGLANG_", "NVIDIA_", "NVTE_", "UCX_", "GLOO_", "NV_", "ENVBUILD_"]
WORDS = ["KEY", "API_KEY", "APIKEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIALS", "AUTH", "ACCESSKEY"]
around = st.text(alphabet=string.ascii_letters + " =:\n\t,;'\"", max_size=30)


def word(n_min, n_max, alphabet=ALNUM):
    return st.text(alphabet=alphabet, min_size=n_min, max_size=n_max)


@settings(max_examples=80, **FUZZ)
@given(prefix=st.sampled_from(PREFIXES), mid=st.sampled_from(["", "X_", "SHARP_", "HUB_"]), w=st.sampled_from(WORDS),
       tail=st.sampled_from(["", "_FILE_VALUE", "_2"]), value=word(1, 40, ALNUM + "-_.@"))
def test_a_credential_word_in_an_allowlisted_name_drops_the_value(prefix, mid, w, tail, value):
    name = f"{prefix}{mid}{w}{tail}"
    assert redact_environ(f"{name}={value}") == f"{name}={REDACTED}"


@settings(max_examples=80, **FUZZ)
@given(prefix=st.sampled_from(PREFIXES), value=st.text(alphabet=ALNUM, min_size=24, max_size=64))
def test_a_generated_key_as_a_value_is_judged_by_the_value(prefix, value):
    lower, upper, digit = (any(c in s for c in value) for s in (string.ascii_lowercase, string.ascii_uppercase,
                                                                   string.digits))
    if not (lower and upper and digit) or len(set(value)) < 18:  # what a generated key looks like
        return
    assert redact_environ(f"{prefix}NOTE={value}") == f"{prefix}NOTE={REDACTED}"


@settings(max_examples=80, **FUZZ)
@given(user=word(1, 12, ALNUM + "._-"), password=word(1, 24, ALNUM + "!#$%^&*()-_+[]{}~"),
       host=word(1, 16, string.ascii_lowercase + string.digits + ".-"), fs=st.sampled_from(["fuse.sshfs", "davfs", "nfs"]))
def test_a_mount_source_keeps_no_password(user, password, host, fs):
    line = f"{user}:{password}@{host}:/export /mnt/x {fs} rw,nosuid 0 0\n"
    out = scrub_text(line)
    assert f":{password}@" not in out and f"{user}:{REDACTED}@" in out


FORMS = [  # (strategy for the secret, what the scrub must remove)
    st.builds(lambda s: "nvapi-" + s, word(20, 60, ALNUM + "_-")),
    st.builds(lambda s: "AIza" + s, word(35, 35, ALNUM + "_-")),
    st.builds(lambda s: "ghp_" + s, word(36, 36)),
    st.builds(lambda s: "glpat-" + s, word(20, 40, ALNUM + "_-")),
    st.builds(lambda s: "hf_" + s, word(30, 40)),
    st.builds(lambda s: "sk_live_" + s, word(24, 24)),
    st.builds(lambda s: "npm_" + s, word(36, 36)),
    st.builds(lambda s: "pypi-AgEIcHlwaS5vcmc" + s, word(70, 90, ALNUM + "_-")),
    st.builds(lambda s: "AKIA" + s, word(16, 16, string.ascii_uppercase + string.digits)),
    st.builds(lambda s: "xoxb-1234567890-" + s, word(10, 30, string.ascii_lowercase + string.digits)),
    st.builds(lambda s: "dapi" + s, word(32, 32, "0123456789abcdef")),
    st.builds(lambda s: "AccountKey=" + s + "==", word(86, 86, ALNUM + "+/")),
]


@settings(max_examples=120, **FUZZ)
@given(data=st.data(), form=st.integers(0, len(FORMS) - 1), before=around, after=around)
def test_every_vendor_form_goes_wherever_it_sits(data, form, before, after):
    secret = data.draw(FORMS[form])
    out = scrub_text(f"{before} {secret} {after}")
    core = secret.split("=", 1)[-1][:20] if secret.startswith("AccountKey=") else secret
    assert core not in out, out
