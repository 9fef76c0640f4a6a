"""The fleet report as JUnit XML: one <testcase> per node x check.

The statuses map as in the node renderer (envbuild/report/junit.py): fail -> <failure>, error -> <error>,
skip -> <skipped>, warn -> a passing case whose <system-out> starts with WARN (a <failure> under --strict). Each
node's suites are named `<node>/envbuild.<category>`, the testcases' classname is `envbuild.<node>.<category>`
(unique across nodes, so CI pages group by node), and the fleet-wide results get a suite `fleet/envbuild.fleet`.

Written as strings, not as an ElementTree: 1000 nodes are 45 000 testcases, and the tree plus its serializer
took 4 s of the merge's 2 s budget. The text is what `ET.indent` + `ET.tostring` wrote for the same tree (the
same escaping, attribute order and indentation); tests/fleet parse it with an XML parser.

One difference from the node renderer, on purpose: a passing case carries its summary and metrics but not its
evidence (the fleet JSON has all of it). Passing results hold 97% of the evidence bytes of a real node report;
written 1000 times that is 30 MB of XML that no CI page shows, and its JSON encoding alone was 1 s.
"""
from __future__ import annotations

import json
import re
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any, Dict, List

from envbuild.fleet.merge import FleetReport, NodeReport
from envbuild.report.junit import _clean
from envbuild.report.model import Result, Status, category_rank

_INF = float("inf")
_TOTALS = ("tests", "failures", "errors", "skipped")


_CDATA_SPECIAL = re.compile("[&<>\x00-\x08\x0b\x0c\x0e-\x1f]")
_ATTR_SPECIAL = re.compile('[&<>"\t\n\r\x00-\x08\x0b\x0c\x0e-\x1f]')


_CDATA_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))  # "&" first: the others add one
_ATTR_ENTITIES = (('"', "&quot;"), ("\r", "&#13;"), ("\n", "&#10;"), ("\t", "&#09;"))


def _replace_each(text: str, entities) -> str:
    for char, entity in entities:
        if char in text:
            text = text.replace(char, entity)
    return text


def _cdata(text: str) -> str:
    """Element text: XML 1.0's forbidden control characters replaced (report/junit.py's _clean), then escaped as
    ElementTree escapes text. One regex search first: most texts need neither."""
    if _CDATA_SPECIAL.search(text) is None:
        return text
    return _replace_each(_clean(text), _CDATA_ENTITIES)


def _attr(text: str) -> str:
    """An attribute value, cleaned and escaped as ElementTree escapes it (newlines and tabs as references)."""
    if _ATTR_SPECIAL.search(text) is None:
        return text
    return _replace_each(_cdata(text), _ATTR_ENTITIES)


def _details(r: Result, evidence: bool) -> str:
    """The case text of envbuild/report/junit.py, with the evidence only where asked."""
    text = r.summary
    if r.remediation:
        text += f"\nfix: {r.remediation}"
    if r.causes:
        text += f"\ncauses: {', '.join(r.causes)}"
    for m in r.metrics:
        text += f"\nmetric {m.name} = {m.value} {m.unit}" + (f" (expect {m.expect})" if m.expect else "")
    if evidence and r.evidence:
        text += "\nevidence: " + _pretty_json(r.evidence)
    return text


class _Unusual(Exception):
    """A value _pretty_json does not format itself (json.dumps then formats the whole evidence)."""


def _pretty_json(value: Any) -> str:
    """json.dumps(value, indent=1, sort_keys=True, default=str), the same text 2x faster: with an indent the
    json module takes its pure-Python encoder (generators all the way down). Plain JSON types only; anything else
    (a tuple, a str subclass, a non-str key, NaN) goes to json.dumps."""
    out: List[str] = []
    put = out.append

    def enc(o: Any, ind: str) -> None:
        t = type(o)
        if t is str:
            put(_json_str(o))
        elif t is dict:
            if not o:
                put("{}")
                return
            inner = ind + " "
            put("{")
            try:
                keys = sorted(o)
            except TypeError:
                raise _Unusual from None
            for k in keys:
                if type(k) is not str:
                    raise _Unusual
                put(inner)
                put(_json_str(k))
                put(": ")
                enc(o[k], inner)
                put(",")
            out[-1] = ind
            put("}")
        elif t is list:
            if not o:
                put("[]")
                return
            inner = ind + " "
            put("[")
            for v in o:
                put(inner)
                enc(v, inner)
                put(",")
            out[-1] = ind
            put("]")
        elif t is int:
            put(int.__repr__(o))
        elif t is float and o == o and o not in (_INF, -_INF):
            put(float.__repr__(o))
        elif o is None:
            put("null")
        elif o is True:
            put("true")
        elif o is False:
            put("false")
        else:
            raise _Unusual

    try:
        enc(value, "\n")
    except _Unusual:
        return json.dumps(value, indent=1, sort_keys=True, default=str)
    return "".join(out)


_UPPER = {s: s.value.upper() for s in Status}


def _suites(node: str, results: List[Result], props: List[str], strict: bool, out: List[str],
            totals: Dict[str, float]) -> None:
    """One <testsuite> per category of one node's results, appended to out."""
    by_cat: Dict[str, List[Result]] = {}
    for r in results:
        by_cat.setdefault(r.category, []).append(r)
    esc_node = _attr(node)
    head = f'  <testsuite name="{esc_node}/envbuild.'
    failing = (Status.FAIL, Status.WARN) if strict else (Status.FAIL,)
    for cat in sorted(by_cat, key=lambda c: (category_rank(c), c)):
        cases: List[str] = []
        fails = errors = skips = 0
        suite_time = 0.0
        open_case = f'    <testcase classname="{_attr(f"envbuild.{node}.{cat}")}" name="'
        for r in by_cat[cat]:
            name = r.check_id + (f"[{r.subject}]" if r.subject else "")
            status = r.status
            suite_time += r.duration_s
            details = _cdata(_details(r, status != Status.PASS))
            case = f'{open_case}{_attr(name)}" time="{r.duration_s:.3f}">\n'
            if status in failing:
                case += f'      <failure message="{_attr(r.summary)}" type="{status.value}">{details}</failure>\n'
                fails += 1
            elif status == Status.ERROR:
                case += f'      <error message="{_attr(r.summary)}" type="error">{details}</error>\n'
                errors += 1
            elif status == Status.SKIP:
                case += f'      <skipped message="{_attr(r.summary)}" />\n'
                skips += 1
            cases.append(f"{case}      <system-out>{_UPPER[status]}: {details}</system-out>\n    </testcase>\n")
        tests = len(by_cat[cat])
        out.append(f'{head}{_attr(cat)}" hostname="{esc_node}" timestamp="{props[0]}" tests="{tests}" '
                   f'failures="{fails}" errors="{errors}" skipped="{skips}" time="{suite_time:.3f}">\n')
        out.append(props[1])
        out.extend(cases)
        out.append("  </testsuite>\n")
        for k, v in zip(_TOTALS, (tests, fails, errors, skips)):
            totals[k] += v
        totals["time"] += float(f"{suite_time:.3f}")


def _props(n: NodeReport, strict: bool) -> List[str]:
    """[the suites' timestamp attribute, their <properties> element], the same for every suite of a node."""
    rep = n.report
    values = (("profile", rep.profile or ""), ("source", rep.host.get("source") or ""),
              ("envbuild_version", rep.envbuild_version),
              ("strict", str(strict or bool(rep.options.get("strict"))).lower()))
    props = "".join(f'      <property name="{k}" value="{_attr(str(v))}" />\n' for k, v in values)
    return [_attr(rep.started_at or ""), f"    <properties>\n{props}    </properties>\n"]


def fleet_to_junit(fleet: FleetReport) -> List[str]:
    """The whole JUnit document, in pieces to be written one after the other."""
    out: List[str] = []
    totals: Dict[str, float] = {k: 0 for k in (*_TOTALS, "time")}
    for n in fleet.nodes:
        strict = fleet.strict or bool(n.report.options.get("strict"))
        _suites(n.node, n.results(), _props(n, fleet.strict), strict, out, totals)
    if fleet.fleet_results:
        fleet_node = NodeReport("fleet", "", _fleet_report(fleet))
        _suites("fleet", list(fleet.fleet_results), _props(fleet_node, fleet.strict), fleet.strict, out, totals)
    head = ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="envbuild fleet" '
            + " ".join(f'{k}="{int(totals[k])}"' for k in _TOTALS) + f' time="{totals["time"]:.3f}"')
    if not out:
        return [head + " />\n"]
    return [head + ">\n", *out, "</testsuites>\n"]


def _fleet_report(fleet: FleetReport):
    from envbuild.report.model import Report

    return Report(host={"hostname": "fleet"}, gpus=[], results=list(fleet.fleet_results),
                  envbuild_version=fleet.envbuild_version)
