"""The pages of the recorded GPU runs opened in a real headless Chromium (Debian's `chromium`, driven by
Playwright for Python with executable_path, never a downloaded browser): every request but the page's own file
is aborted and counted (there must be none), the plots have a drawn size and the expected number of marks, and a
screenshot is held against a committed reference (tests/report/reference/*.png) by a coarse perceptual
comparison that survives font differences.

.ci/run installs chromium and sets ENVBUILD_REQUIRE_BROWSER=1, so there a missing browser fails these tests;
elsewhere they skip with the reason. ENVBUILD_UPDATE_SCREENSHOTS=1 rewrites the references (look at them first).
"""
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "docs" / "gpu-runs"
REFERENCE = Path(__file__).resolve().parent / "reference"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1300, "height": 900}


def _unavailable(why):
    if os.environ.get("ENVBUILD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why} (ENVBUILD_REQUIRE_BROWSER=1)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    """One headless Chromium for the module, with a new empty profile directory."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright; never `playwright install`)")
    if not os.path.exists(CHROMIUM):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    pw = sync_playwright().start()
    ctx = pw.chromium.launch_persistent_context(str(tmp_path_factory.mktemp("chromium-profile")),
                                                executable_path=CHROMIUM, args=FLAGS, headless=True,
                                                viewport=VIEWPORT, device_scale_factor=1, offline=True)
    yield ctx
    ctx.close()
    pw.stop()


def page_of(tmp_path, name, *inputs, reference=()):
    from envbuild.report.html import render_files, write_html

    text, _ = render_files([str(p) for p in inputs], nccl_tests=[str(r) for r in reference])
    path = tmp_path / f"{name}.html"
    write_html(text, str(path))
    return path


class Opened:
    """A page loaded with every request not to its own file aborted and recorded."""

    def __init__(self, ctx, path):
        self.requests, self.blocked, self.errors = [], [], []
        self.page = ctx.new_page()
        own = path.as_uri()

        def route(r):
            if r.request.url == own or r.request.url.startswith("data:"):
                r.continue_()
            else:
                self.blocked.append(r.request.url)
                r.abort()

        self.page.route("**/*", route)
        self.page.on("request", lambda req: self.requests.append(req.url))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(own, wait_until="load")
        self.own = own

    def boxes(self, selector):
        """(width, height) of every element matching selector, as the browser laid it out."""
        return self.page.evaluate(
            "s => [...document.querySelectorAll(s)].map(e => { const b = e.getBoundingClientRect(); "
            "return [b.width, b.height]; })", selector)

    def assert_isolated(self):
        assert self.blocked == [], self.blocked
        assert self.requests == [self.own], self.requests
        assert self.errors == []

    def close(self):
        self.page.close()


def drawn(boxes, min_w=0.5, min_h=0.5):
    return bool(boxes) and all(w >= min_w and h >= min_h for w, h in boxes)


def test_full_doctor_run_draws_heatmap_and_busbw_in_chromium(chromium, tmp_path):
    path = page_of(tmp_path, "full", RUNS / "doctor-full-2gpu.json", reference=[RUNS / "bench-allreduce-s2.json"])
    view = Opened(chromium, path)
    try:
        view.assert_isolated()
        plots = view.boxes(".plot > svg")
        assert len(plots) == 2 and drawn(plots, 300, 200), plots
        cells = view.boxes("#plot-p2p [id^='p2p-cell-']")
        assert len(cells) == 2 and drawn(cells, 40, 40), cells  # GPU 0->1 and 1->0, squares of the heat map
        fill = view.page.evaluate("getComputedStyle(document.querySelector('#p2p-cell-0-1 path')).fill")
        r, g, b = (int(v) for v in fill[fill.index("(") + 1:-1].split(",")[:3])
        assert g > r and g > b, fill  # 0.82 of the line rate is on the green side
        lines = view.boxes("#plot-nccl [id^='busbw-line-'] > path")
        assert len(lines) == 10 and drawn(lines, 200, 20), lines  # 5 collectives x NCCL_CUMEM_ENABLE=0/1
        points = view.boxes("#plot-nccl [id^='busbw-line-'] use")
        assert len(points) == 10 * 6 and drawn(points, 3, 3)  # 1 MiB .. 1 GiB on each line
        refs = view.boxes("#plot-nccl [id^='nccl-ref-'] use")
        assert len(refs) == 3 and drawn(refs, 3, 3), refs  # nccl-tests at 64 MiB, 256 MiB, 1 GiB
        assert view.page.inner_text("#verdict h1").startswith("PASS with warnings")
        compare_screenshot(view.page.screenshot(), "doctor-full-2gpu-top", tmp_path)
        compare_screenshot(view.page.locator("#plot-nccl").screenshot(), "doctor-full-2gpu-busbw", tmp_path)
        # the comparison survives another font (text moves within its blocks) ...
        view.page.add_style_tag(content="body, svg text { font-family: 'DejaVu Serif', serif !important; }")
        view.page.evaluate("window.scrollTo(0, 0)")
        compare_screenshot(view.page.screenshot(), "doctor-full-2gpu-top", tmp_path)
    finally:
        view.close()


def test_screenshot_comparison_tells_another_verdict_apart(chromium, tmp_path):
    """... but not another page: the failing P2P-disabled run against the passing run's reference."""
    view = Opened(chromium, page_of(tmp_path, "fault", RUNS / "h5-fault-p2p-disable.json"))
    try:
        with pytest.raises(pytest.fail.Exception, match="screenshot differs"):
            compare_screenshot(view.page.screenshot(), "doctor-full-2gpu-top", tmp_path)
        busbw = view.page.locator("#plot-nccl").screenshot()
        with pytest.raises(pytest.fail.Exception, match="differs|layout changed"):
            compare_screenshot(busbw, "doctor-full-2gpu-busbw", tmp_path)
    finally:
        view.close()


def test_train_step_and_missing_sections_in_chromium(chromium, tmp_path):
    path = page_of(tmp_path, "train", RUNS / "train-moe-default-2gpu.json")
    view = Opened(chromium, path)
    try:
        view.assert_isolated()
        curves = view.boxes("#plot-train [id^='train-mem-'] > path")
        assert len(curves) == 4 and drawn(curves, 100, 0), curves
        bars = view.boxes("#plot-train [id^='train-time-']")
        assert len(bars) == 13 + 4 * 10 and drawn(bars, 10, 0), len(bars)  # train every step, 4 phases per cycle
        assert sum(h for _, h in bars) > 150  # a 0.05 s sync is a hairline, the 42 s first cycle is not
        assert "gpu.p2p did not run" in view.page.inner_text("#p2p")
        compare_screenshot(view.page.locator("#plot-train").screenshot(), "train-moe-default-2gpu", tmp_path)
    finally:
        view.close()


@pytest.mark.parametrize("run", ["doctor-quick-2gpu-s3.json", "h5-probes-2gpu-full.json", "node-doctor-static.json",
                                 "h5-fault-p2p-disable.json"])
def test_recorded_runs_open_offline_with_their_plots(chromium, tmp_path, run):
    path = page_of(tmp_path, run, RUNS / run)
    view = Opened(chromium, path)
    try:
        view.assert_isolated()
        plots = view.boxes(".plot > svg")
        want = {"doctor-quick-2gpu-s3.json": 2, "h5-probes-2gpu-full.json": 1, "node-doctor-static.json": 0,
                "h5-fault-p2p-disable.json": 1}[run]
        assert len(plots) == want and (want == 0 or drawn(plots, 300, 150)), plots
        if want == 0:
            assert view.page.locator(".missing").count() == 4
        data = json.loads((RUNS / run).read_text())
        verdict = view.page.get_attribute("#verdict", "data-verdict")
        assert verdict == ("fail" if data["exit_code"] else "warn" if data["summary"]["warn"] else "pass")
        fixes = [r for r in data["results"] if r["status"] in ("fail", "warn", "error")]
        assert view.page.locator("tr.finding").count() == len({(r["check_id"], r["status"], r["remediation"] or "")
                                                               for r in fixes})
    finally:
        view.close()


def test_fleet_of_64_nodes_grid_and_plots_in_chromium(chromium, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_report_html", REPO / "benchmarks" / "bench_report_html.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.write_fleet(tmp_path / "fleet", 64)
    path = page_of(tmp_path, "fleet", tmp_path / "fleet")
    view = Opened(chromium, path)
    try:
        view.assert_isolated()
        rows = view.page.locator("table.grid tr[class^='v-']")
        assert rows.count() == 64
        assert view.page.locator("table.grid tr[class^='v-'] th.node").first.inner_text().endswith("node-017")
        cells = view.boxes("table.grid td")
        assert len(cells) == 64 * view.page.locator("table.grid th.check").count() and drawn(cells, 8, 8)
        bars = view.boxes("#plot-nccl-nodes [id^='fleet-busbw-']")
        assert len(bars) == 64 and drawn(bars, 1, 1)
        dots = view.boxes("#plot-p2p #fleet-p2p use")
        assert len(dots) == 64 and drawn(dots, 2, 2)
        crowd = view.boxes("#plot-nccl #busbw-crowd-all_reduce path")
        assert len(crowd) == 63  # every node but the slowest, which is drawn on top in red
        compare_screenshot(view.page.screenshot(), "fleet-64-top", tmp_path)
    finally:
        view.close()


def compare_screenshot(png, name, tmp_path, tolerance=6.0):
    """Hold a screenshot against tests/report/reference/NAME.png: both scaled to the reference's size, blurred to
    blocks of 12 px in grey (text rendered in another font moves within a block, a missing plot or another
    verdict colour does not), then the mean difference per block must stay under `tolerance` of 255 and no
    block may differ by more than 10x that (measured here: the same page in DejaVu Serif instead of Sans 0.9 / 31,
    the failing P2P-disabled run against the passing run 18.4 / 160). Also the mean colour must match (a red header for a green one)."""
    import io

    from PIL import Image, ImageChops, ImageFilter, ImageStat

    actual = Image.open(io.BytesIO(png)).convert("RGB")
    ref_path = REFERENCE / f"{name}.png"
    if os.environ.get("ENVBUILD_UPDATE_SCREENSHOTS") == "1":
        REFERENCE.mkdir(exist_ok=True)
        actual.save(ref_path, optimize=True)
        return
    assert ref_path.exists(), f"no reference screenshot {ref_path}; run with ENVBUILD_UPDATE_SCREENSHOTS=1 and look at it"
    ref = Image.open(ref_path).convert("RGB")
    if abs(actual.height - ref.height) > 0.2 * ref.height:
        pytest.fail(f"{name}: screenshot {actual.size} vs reference {ref.size}: the layout changed")
    actual = actual.resize(ref.size, Image.BILINEAR)
    small = (max(1, ref.width // 12), max(1, ref.height // 12))

    def blocks(img):
        return img.filter(ImageFilter.GaussianBlur(4)).resize(small, Image.BOX)

    diff = ImageChops.difference(blocks(actual), blocks(ref)).convert("L")
    mean = ImageStat.Stat(diff).mean[0]
    worst = diff.getextrema()[1]
    colour = max(abs(a - b) for a, b in zip(ImageStat.Stat(actual).mean, ImageStat.Stat(ref).mean))
    if mean > tolerance or worst > 10 * tolerance or colour > tolerance:
        out = tmp_path / f"{name}.actual.png"
        actual.save(out)
        diff.resize(ref.size).save(tmp_path / f"{name}.diff.png")
        pytest.fail(f"{name}: screenshot differs from {ref_path} (mean {mean:.1f}, worst block {worst}, colour "
                    f"{colour:.1f}; tolerance {tolerance}); see {out}")
