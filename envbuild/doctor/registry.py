"""The check registry: every check is declared once, with what it needs, the options it takes and, for a GPU
probe, the spec the runner executes.

Check modules live in envbuild/doctor/checks/, one per check, named after its id (`node.ulimits` in
node_ulimits.py; the registry refuses any other name), and register themselves with @check(...) (a static check: a
plain function of the context) or @probe_check(...) (a payload under checks/ that the runner launches; the function
only judges what the payload reported). They are discovered by walking that package, so adding a check never
means editing a shared list. A check returns `verdict(...)` Results: the runner stamps its id and category.
"""
from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from envbuild.doctor.verdict import DEFAULT_HANG_CAUSES, verdict
from envbuild.errors import EnvbuildError
from envbuild.report.model import CATEGORIES, Result, category_rank

__all__ = ["CATEGORIES", "category_rank", "Check", "Option", "OptionError", "ProbeSpec", "check", "probe_check",
           "verdict", "discover", "all_checks", "select", "declared_options", "validate_options", "RENAMED"]

# What a check can need. The runner skips (with the reason) a check whose needs the run cannot meet. "stack": it
# reads the stack probe's facts (every stack.* check has it), so while that probe still runs the runner starts
# the checks after it first (envbuild/doctor/runner.py next_check).
NEEDS = frozenset({"gpu", "multi_gpu", "profile", "live", "stack"})
MODES = ("static", "quick", "full")
PROBE_MODES = ("quick", "full")  # a probe has no static size: a static run that names it gets the quick one

# Ids a check had before it got its category's prefix; `--check OLD` runs the new one (docs/README.md).
RENAMED = {"cumem.ipc": "gpu.cumem_ipc", "weight.sync": "comm.weight_sync", "offload.cycle": "comm.offload_cycle"}

CheckFn = Callable[..., Union[Result, List[Result]]]


class OptionError(EnvbuildError):
    """A `--set KEY=VALUE` the checks do not declare, or a value of the wrong type (exit 2); the message names
    the key and the valid ones."""


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
OPTION_TYPES = ("int", "float", "str", "bool", "choice", "ints")
_NUMERIC = ("int", "float", "ints")
LISTING = "envbuild doctor --list-options"


@dataclass(frozen=True)
class Option:
    """One `--set KEY=VALUE` a check takes: its type, its default (None = the check decides, e.g. by mode), a help
    line and, for a number, its bounds. `envbuild doctor --list-options` prints these; the settings of a doctor
    run (envbuild/doctor/settings.py) turn the user's strings into these typed values once, before any work.

    Why bounds on every number: a value that parses but cannot be meant (train.steps=0, a 30-digit layer count,
    gpu.compute.seconds=inf) must exit 2 naming the bound before a run, not become an error row after one.
    `low` and `high` are inclusive; `low_open` makes `low` itself refused (a time must be more than 0)."""

    key: str
    type: str
    default: Any
    help: str
    choices: Tuple[str, ...] = ()
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise ValueError(f"option {self.key}: unknown type {self.type!r}")
        if (self.type == "choice") != bool(self.choices):
            raise ValueError(f"option {self.key}: choices go with type 'choice' only")
        if (self.type in _NUMERIC) != (self.low is not None and self.high is not None):
            raise ValueError(f"option {self.key}: a number has both bounds (low, high); other types have none")

    def type_label(self) -> str:
        return "|".join(self.choices) if self.type == "choice" else ("int,int,..." if self.type == "ints" else self.type)

    def bounds_label(self) -> str:
        """'1..1024', '>0..3600', or '' for a type without bounds."""
        if self.low is None or self.high is None:
            return ""
        return f"{'>' if self.low_open else ''}{_num(self.low)}..{_num(self.high)}"

    def parse(self, raw: Any) -> Any:
        """The typed, bounded value of `raw` (the CLI's string), or OptionError naming the key and what is expected."""
        text = str(raw).strip()
        bad = OptionError(f"--set {self.key}={text!r}: expected {self.type_label()} ({self.help})")
        if self.type == "str":
            return text
        if self.type == "choice":
            if text not in self.choices:
                raise bad
            return text
        if self.type == "bool":
            if text.lower() not in _TRUE | _FALSE:
                raise bad
            return text.lower() in _TRUE
        try:
            if self.type == "int":
                return self._bounded(int(text), text)
            if self.type == "float":
                return self._bounded(float(text), text)
            values = [int(s) for s in text.split(",") if s.strip()]
        except ValueError:  # also a number longer than Python's 4300-digit string limit
            raise bad from None
        if not values:
            raise bad
        return [self._bounded(v, text) for v in values]

    def _bounded(self, value: Any, text: str) -> Any:
        assert self.low is not None and self.high is not None
        if value != value or value in (float("inf"), float("-inf")):
            raise OptionError(f"--set {self.key}={text}: must be a finite number ({self.help})")
        shown = text if len(text) <= 24 else text[:20] + "..."
        if value < self.low or (self.low_open and value == self.low):
            word = "greater than" if self.low_open else "at least"
            raise OptionError(f"--set {self.key}={shown}: must be {word} {_num(self.low)} ({self.help})")
        if value > self.high:
            raise OptionError(f"--set {self.key}={shown}: must be at most {_num(self.high)} ({self.help})")
        return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class ProbeSpec:
    """What the runner needs to launch a probe: its payload, how many ranks, its deadlines and what a hang or a
    crash points to. The check module keeps only how to judge the evidence."""

    payload: str  # file name under checks/ (the check's id with "_" for "."), e.g. "gpu_basic.py"
    what: str  # how the summary names the probe: "the basic GPU probe"
    deadline_s: Mapping[str, float]  # per probe mode (quick, full): the whole run's deadline
    phase_deadlines: Mapping[str, float] = field(default_factory=dict)  # phase (or "*") -> most seconds in it
    ranks: str = "per_gpu"  # "per_gpu": one process per selected GPU; "one": one process that sees them all
    max_gpus: Optional[int] = None  # the probe uses at most this many of the selected GPUs
    backend: str = "nccl"  # torch.distributed backend the launcher sets up ("none": no process group)
    hang_causes: Tuple[str, ...] = DEFAULT_HANG_CAUSES
    crash_causes: Tuple[str, ...] = ()  # empty: the causes the crashed payload's own verdict names
    # Variables the ranks need from their first instruction (a payload that would re-exec itself with an
    # LD_PRELOAD): called with the check's ProbeRun; every launch of the check gets them, and warm ranks for
    # the check are started with them ahead of time (envbuild/doctor/warm.py). None: the ranks need nothing.
    start_env: Optional[Callable[[Any], Dict[str, str]]] = None
    # Its ranks' exits (the teardown after their results) run behind the next check (launcher.launch(drain=True)):
    # a crash or a hang there still fails this check, once the runner has read the drain (runner.py).
    teardown_behind: bool = False
    # Its ranks may start while an earlier probe's ranks still exit: its payload waits for them before it measures
    # (checks/_harness.py Probe.settle), or measures nothing another process on the GPU could move. Otherwise the
    # runner waits for those exits before the check starts.
    starts_beside_teardown: bool = False

    def __post_init__(self) -> None:
        if set(self.deadline_s) != set(PROBE_MODES):
            raise ValueError(f"probe {self.payload}: deadline_s needs exactly {PROBE_MODES}")
        if self.ranks not in ("per_gpu", "one"):
            raise ValueError(f"probe {self.payload}: ranks must be per_gpu or one")

    def failure(self, outcome: Any, *, subject: Optional[str] = None, crash_causes: Optional[Sequence[str]] = None,
                hang_causes: Optional[Sequence[str]] = None) -> Optional[Result]:
        """The hang/crash `fail` (or no-verdict `error`) of a launch with this probe's causes; None when every
        rank gave a verdict. The overrides replace the spec's causes when the evidence names better ones."""
        from envbuild.doctor.probes import failure_result

        return failure_result(outcome, what=self.what, subject=subject,
                              hang_causes=self.hang_causes if hang_causes is None else hang_causes,
                              crash_causes=self.crash_causes if crash_causes is None else crash_causes)


@dataclass(frozen=True)
class Check:
    id: str
    category: str
    title: str
    fn: CheckFn
    needs: FrozenSet[str] = frozenset()
    causes: Tuple[str, ...] = ()
    modes: FrozenSet[str] = frozenset(MODES)  # doctor modes that run it
    options: Tuple[Option, ...] = ()
    probe: Optional[ProbeSpec] = None  # None: a static check, fn(ctx); else fn(ctx, run: ProbeRun)
    doc: str = ""


# The package discover() walks. A check registered there lives in the module named after its id (cat.name ->
# cat_name.py); private modules (_name.py) hold only what two checks share. Checks registered from elsewhere (a
# test's driver script) are not discovered and keep whatever module they come from.
CHECKS_PACKAGE = "envbuild.doctor.checks"

_REGISTRY: Dict[str, Check] = {}
_DISCOVERED = False


def _register(id: str, category: str, title: str, fn: CheckFn, needs: Iterable[str], causes: Sequence[str],
              modes: Iterable[str], options: Sequence[Option], probe: Optional[ProbeSpec]) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"check {id}: unknown category {category!r}")
    if not id.startswith(category + "."):
        raise ValueError(f"check {id}: the id must start with its category {category!r}")
    stem = id.replace(".", "_")
    if probe is not None and probe.payload != stem + ".py":
        raise ValueError(f"check {id}: its payload must be checks/{stem}.py, not {probe.payload}")
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(CHECKS_PACKAGE + ".") and module != f"{CHECKS_PACKAGE}.{stem}":
        raise ValueError(f"check {id}: it must live in envbuild/doctor/checks/{stem}.py, not "
                         f"{module.rsplit('.', 1)[-1]}.py (one check per module, named after its id)")
    needs = set(needs) | ({"stack"} if category == "stack" else set())
    unknown = needs - NEEDS
    if unknown:
        raise ValueError(f"check {id}: unknown needs {sorted(unknown)}")
    if id in _REGISTRY and _REGISTRY[id].fn is not fn:
        raise ValueError(f"check id {id} registered twice")
    _REGISTRY[id] = Check(id=id, category=category, title=title, fn=fn, needs=frozenset(needs),
                          causes=tuple(causes), modes=frozenset(modes), options=tuple(options), probe=probe,
                          doc=(fn.__doc__ or "").strip())


def check(id: str, category: str, title: str, needs: Iterable[str] = (), causes: Sequence[str] = (),
          modes: Iterable[str] = MODES, options: Sequence[Option] = ()) -> Callable[[CheckFn], CheckFn]:
    """Register a static check `fn(ctx)`. `causes` are ids in envbuild/knowledge that the check can point to."""

    def wrap(fn: CheckFn) -> CheckFn:
        _register(id, category, title, fn, needs, causes, modes, options, None)
        return fn

    return wrap


def probe_check(id: str, category: str, title: str, *, probe: ProbeSpec, needs: Iterable[str] = ("gpu",),
                causes: Sequence[str] = (), modes: Iterable[str] = PROBE_MODES,
                options: Sequence[Option] = ()) -> Callable[[CheckFn], CheckFn]:
    """Register a GPU probe: `fn(ctx, run)` asks `run` (envbuild/doctor/probe_run.py) to launch the payload and
    judges its evidence; a hang or a crash never reaches it (the runner reports those)."""

    def wrap(fn: CheckFn) -> CheckFn:
        _register(id, category, title, fn, needs, causes, modes, options, probe)
        return fn

    return wrap


def discover() -> Dict[str, Check]:
    """Import every module under envbuild.doctor.checks once, so their decorators run."""
    global _DISCOVERED
    if not _DISCOVERED:
        import envbuild.doctor.checks as pkg

        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
        _DISCOVERED = True
    return dict(_REGISTRY)


def all_checks() -> List[Check]:
    """Every registered check, in category order then id order."""
    checks = discover().values()
    return sorted(checks, key=lambda c: (category_rank(c.category), c.id))


def select(patterns: Sequence[str] = (), skip: Sequence[str] = (), mode: Optional[str] = "static") -> List[Check]:
    """Checks matching any of `patterns` (ids or globs; all when empty), minus `skip`, that run in `mode`
    (every mode when `mode` is None, as `--list` shows). An old id (RENAMED) stands for its new one.

    An explicit pattern that matches nothing is a usage error: a typo must not silently run zero checks.
    """
    patterns = [RENAMED.get(p, p) for p in patterns]
    skip = [RENAMED.get(p, p) for p in skip]

    def matches(c: Check, pats: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(c.id, p) or c.category == p for p in pats)

    checks = all_checks()
    for pat in list(patterns) + list(skip):
        if not any(matches(c, (pat,)) for c in checks):
            from envbuild.suggest import did_you_mean

            names = [c.id for c in checks] + sorted({c.category for c in checks}) + list(RENAMED)
            raise EnvbuildError(f"no check matches {pat!r}; {did_you_mean(pat, names, 'envbuild doctor --list')}")

    chosen = [c for c in checks if (not patterns or matches(c, patterns)) and not matches(c, skip)]
    if not patterns and mode is not None:  # an explicit --check runs a check whatever the mode
        chosen = [c for c in chosen if mode in c.modes]
    return chosen


def declared_options() -> Dict[str, Tuple[Option, List[str]]]:
    """Every `--set` key the checks declare -> (its Option, the ids of the checks that take it), sorted by key.

    Two checks may share a key (comm.phase_deadline_s) only with the same declaration.
    """
    out: Dict[str, Tuple[Option, List[str]]] = {}
    for c in all_checks():
        for opt in c.options:
            if opt.key in out and out[opt.key][0] != opt:
                raise ValueError(f"option {opt.key} declared differently by {out[opt.key][1]} and {c.id}")
            out.setdefault(opt.key, (opt, []))[1].append(c.id)
    return dict(sorted(out.items()))


def validate_options(raw: Mapping[str, Any]) -> Dict[str, Any]:
    """The typed, bounded values of the user's `--set` options (parsed here once: checks read them through
    ctx.option); OptionError for an unknown key (with the closest keys) or a value out of its type or bounds, so a
    typo never runs the default silently."""
    from envbuild.suggest import did_you_mean

    known = declared_options()
    out: Dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise OptionError(f"--set {key}: no check takes this option; {did_you_mean(key, known, LISTING)}")
        out[key] = known[key][0].parse(value)
    return out
