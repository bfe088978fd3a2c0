"""Reports for a synthetic run directory: the Markdown tables' content, and report.html as a
headless Chromium sees it."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from pytest_ponybench.reports import report

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def make_run(tmp_path, arms=("baseline", "terse")):
    """Three tasks x the arms x haiku x 4 runs, each cell with its workspace and transcript.

    t1: baseline correct 0/4, LOC 100,100,120,120; terse correct 4/4, LOC 50,50,60,60.
    t2: both correct 4/4; LOC baseline 100 x4, terse 80 x4.
    t3: both correct 4/4; LOC 100 x4 on both sides.
    t4: a single terse cell whose agent errored (fields None), no baseline.
    Every cell safe, cost $0.10 (the errored one None).
    """
    run_dir = tmp_path / "2025-01-01T00-00-00"
    design = {
        ("t1", "baseline"): ([0] * 4, [100, 100, 120, 120]),
        ("t1", "terse"): ([1] * 4, [50, 50, 60, 60]),
        ("t2", "baseline"): ([1] * 4, [100] * 4),
        ("t2", "terse"): ([1] * 4, [80] * 4),
        ("t3", "baseline"): ([1] * 4, [100] * 4),
        ("t3", "terse"): ([1] * 4, [100] * 4),
    }
    records = []
    for (task, arm), (correct, locs) in design.items():
        if arm not in arms:
            continue
        for run, (c, loc) in enumerate(zip(correct, locs)):
            records.append(new_cell(run_dir, task, arm, run, correct=c, safe=1, passed=bool(c),
                                    total_loc=loc, cost_usd=0.1, out_tokens=900,
                                    duration_ms=42000, status="finished", ran=True, error=""))
    if "terse" in arms:
        records.append(new_cell(run_dir, "t4", "terse", 0, correct=0, safe=0, passed=False,
                                total_loc=None, cost_usd=None, out_tokens=None,
                                duration_ms=None, status="cli_error", ran=False,
                                error="claude exited with status 1"))
    return run_dir, records


def new_cell(run_dir, task, arm, run, **fields):
    cell = f"{task}__{arm}__haiku__{run}"
    workspace = run_dir / cell
    workspace.mkdir(parents=True)
    (workspace / "_ponybench.transcript.jsonl").write_text('{"type": "system"}\n')
    return dict(cell=cell, task=task, arm=arm, model="haiku", run=run,
                workspace=str(workspace), **fields)


def table_rows(markdown, title):
    """The rows (lists of cell strings) of the Markdown table under the heading `title`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip() == title)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    assert rows, f"no table under {title!r}"
    return rows[0], rows[2:]  # header, body (skipping the alignment row)


def test_markdown_tables(tmp_path):
    run_dir, records = make_run(tmp_path)
    paths = report.write_reports(run_dir, records)
    assert paths == [run_dir / "summary.md", run_dir / "report.html"]
    md = (run_dir / "summary.md").read_text()
    assert "25 cells;" in md and "total cost $2.400" in md  # 24 cells x $0.10, one None

    header, rows = table_rows(md, "t1 · haiku")
    # robust '-': these tasks have no robust check (not measured, never a pass)
    assert header == ["arm", "n", "correct", "safe", "robust", "wrote code", "LOC median", "LOC, all cells",
                      "tokens", "cost/cell"]
    assert rows == [
        ["baseline (reference)", "4", "0/4 (0%)", "4/4 (100%)", "-", "4/4 (100%)", "110", "110", "-", "$0.100"],
        ["terse", "4", "4/4 (100%)", "4/4 (100%)", "-", "4/4 (100%)", "55", "55", "-", "$0.100"],
    ]
    # A CLI error is the agent's failure under its arm: measured, and it failed.
    _, rows = table_rows(md, "t4 · haiku")
    assert rows == [["terse", "1", "0/1 (0%)", "0/1 (0%)", "-", "0/1 (0%)", "-", "-", "-", "-"]]

    header, rows = table_rows(md, "Arms against `baseline`, per task (exploratory)")
    assert header[4:11] == ["correct Δ [95% CI]", "p (BH)", "safe Δ [95% CI]", "p (BH)",
                            "robust Δ [95% CI]", "p (BH)", "LOC ratio [95% CI]"]
    by_task = {row[0]: row for row in rows}
    # t1 correct 4/4 vs 0/4. Newcombe: Wilson(4/4) = [4/(4+z^2), 1] = [0.5101, 1],
    # Wilson(0/4) = [0, 0.4899]; low = 1 - sqrt(0.4899^2 + 0.4899^2) = 0.307 -> +31 pp.
    # Fisher: 2 of C(8,4) = 70 tables as extreme, p = 0.0286. Benjamini-Hochberg over terse's
    # correct tests: t2 and t3 (4/4 against 4/4) cannot give p < 0.05 and are left out, so
    # the family is t1 alone: 0.0286 stays, and the interval excludes 0: a finding.
    # LOC: medians 55 / 110 = 0.5; resampled medians stay within 50..60 / 100..120.
    assert by_task["t1"][4:11] == ["+100 pp [+31, +100]", "0.0286 (0.0286)", "+0 pp [-49, +49]",
                                   "1 (1)", "-", "-", "0.50x [0.42, 0.60]"]
    assert by_task["t1"][11] == "correct higher; LOC fewer lines"
    # t2, t3: every run of both sides has the same LOC: a ratio without an interval.
    no_spread = "no clear difference (LOC: no spread in 4 runs against 4: no interval)"
    assert by_task["t2"][10:12] == ["0.80x (no spread)", no_spread]
    assert by_task["t3"][10:12] == ["1.00x (no spread)", no_spread]
    # Inconclusive at 4 runs: from a reference rate of 100% (or 0%), 35 runs per arm would
    # detect a 20 pp difference (worked out in test_stats.py's power tests).
    assert by_task["t2"][12] == by_task["t3"][12] == "35"
    assert by_task["t4"][4] == "too few runs"
    assert by_task["t4"][11] == "too few runs to conclude: terse 1, baseline 0 (need 3 per side)"
    assert "Benjamini-Hochberg" in md and "Holm" not in md and "Newcombe" in md

    _, rows = table_rows(md, "Arms against `baseline`, pooled over tasks")
    # Per-task correct differences 1, 0, 0: mean +33 pp; no within-task spread, so resampling
    # 3 tasks gives K/3 with P(K=0) = 8/27, P(K=3) = 1/27 (both > 2.5%): interval [0, 100].
    # LOC: geometric mean of 0.5, 0.8, 1.0 = 0.4 ** (1/3) = 0.737.
    # Terse correct 12 of 12: the Wilson floor 12 / (12 + z^2) = 0.757 (not [100%, 100%]).
    # Safe 12 of 12 on both sides: Newcombe [-(1 - 0.757), +(1 - 0.757)] = [-24, +24].
    (row,) = rows
    assert row[:9] == ["haiku", "terse", "3", "100% [76%, 100%]", "+33 pp [+0, +100]",
                       "100% [76%, 100%]", "+0 pp [-24, +24]", "-", "-"]
    assert row[9].startswith("0.74x [")

    _, rows = table_rows(md, "Consistency")
    # pass^4: baseline C(0,4)/C(4,4) = 0 on t1, 1 on t2 and t3: 2/3; pass^1 the same here.
    assert rows == [
        ["baseline", "haiku", "3", "2/3 (67%)", "0/3 (0%)", "1/3 (33%)",
         "pass^4 67% (pass^1 67%; k = 4, the smallest run count over the arms of haiku)", ""],
        ["terse", "haiku", "3", "3/3 (100%)", "0/3 (0%)", "0/3 (0%)",
         "pass^4 100% (pass^1 100%; k = 4, the smallest run count over the arms of haiku)", ""],
    ]
    assert "## How to read" in md


def test_single_arm_and_broken_records_do_not_crash(tmp_path):
    run_dir, records = make_run(tmp_path, arms=("baseline",))
    records += [{}, {"task": None, "arm": None, "model": None, "correct": None, "safe": None,
                     "total_loc": None, "cost_usd": None, "status": None}]
    report.write_reports(run_dir, records)
    md = (run_dir / "summary.md").read_text()
    assert "only the reference arm 'baseline' ran: nothing to compare" in md
    assert "### ? · ?" in md
    assert "2 records lack a task, arm or model" in md
    page = (run_dir / "report.html").read_text()
    assert 'id="consistency"' in page and 'id="comparisons"' not in page


def test_empty_run(tmp_path):
    report.write_reports(tmp_path, [])
    assert "0 cells" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "report.html").exists()


def test_html_without_matplotlib(tmp_path, monkeypatch):
    # A None entry in sys.modules makes the import raise ImportError, as if not installed.
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    run_dir, records = make_run(tmp_path)
    report.write_reports(run_dir, records)
    page = (run_dir / "report.html").read_text()
    assert "Plots need matplotlib: pip install matplotlib" in page
    assert "<img" not in page
    assert 'id="comparisons"' in page and 'id="cells"' in page


# --------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="session")
def chromium():
    """Headless Chromium (Debian package `chromium`). Skipped locally without it; in CI
    (CI=true) its absence fails the test, because .ci/run installs it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    message = "chromium is not installed: apt-get install -y chromium"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


# The test's own probe, put into a copy of the page (report.html carries no script): JS errors
# on <html data-js-errors>, and once loaded, data-report-ready and the number of images that
# failed to decode.
PROBE = """<script>
window.ponybenchErrors = [];
window.addEventListener("error", function (event) {
  window.ponybenchErrors.push(String(event.message));
  document.documentElement.setAttribute("data-js-errors", String(window.ponybenchErrors.length));
});
window.addEventListener("load", function () {
  var broken = 0;
  document.querySelectorAll("img").forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) { broken += 1; }
  });
  document.documentElement.setAttribute("data-broken-images", String(broken));
  // Where the answer per arm ends, against the window (1400 x 900): read without scrolling?
  var primary = document.getElementById("primary");
  if (primary) {
    var box = primary.getBoundingClientRect();
    document.documentElement.setAttribute("data-primary-box", [Math.ceil(box.right), Math.ceil(box.bottom),
      window.innerWidth, window.innerHeight, primary.scrollWidth - primary.clientWidth].join(" "));
  }
  document.documentElement.setAttribute("data-report-ready", "yes");
});
</script>"""


def dump_dom(chromium, page, tmp_path):
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text.split("</head>")[0], "report.html must carry no script of its own"
    probed = page.with_name("probed-" + page.name)  # beside it: the relative links still resolve
    probed.write_text(text.replace("</head>", PROBE + "</head>", 1), encoding="utf-8")
    page = probed
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--no-first-run",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000",
         "--window-size=1400,900",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def html_tag(dom):
    return re.search(r"<html[^>]*>", dom).group(0)


def require_matplotlib():
    """The plots need the `report` extra; .ci/run installs it, so in CI its absence fails."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        message = "matplotlib is not installed: pip install -e '.[report]'"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def test_report_html_in_chromium(tmp_path, chromium):
    require_matplotlib()
    run_dir, records = make_run(tmp_path)
    report.write_reports(run_dir, records)
    dom = dump_dom(chromium, run_dir / "report.html", tmp_path)
    root = html_tag(dom)
    # Set by the page's own script on load; a JS error would set data-js-errors.
    assert 'data-report-ready="yes"' in root
    assert "data-js-errors" not in root
    assert 'data-broken-images="0"' in root
    for table_id in ("comparisons", "pooled", "consistency", "cells"):
        assert f'<table id="{table_id}">' in dom
    assert dom.count("<table") == 4 + 4  # 4 task x model tables
    images = re.findall(r'<img class="plot" alt="([^"]*)" src="data:image/png;base64,', dom)
    assert images == ["LOC per arm and task, haiku", "Correct and safe rates with intervals, haiku",
                      "Cost against LOC, haiku"]
    # Relative links to each cell's workspace and transcript, nothing fetched from outside.
    assert '<a href="t1__terse__haiku__0/">t1__terse__haiku__0/</a>' in dom
    assert '<a href="t1__terse__haiku__0/_ponybench.transcript.jsonl">transcript</a>' in dom
    assert not re.search(r'(src|href)="(https?:)?//', dom)
    assert "+100 pp [+31, +100]" in dom
    # The answer per arm is on the first screen of a 1400 x 900 window, nothing of it cut off.
    right, bottom, width, height, overflow = map(int, re.search(r'data-primary-box="([^"]*)"', root).group(1).split())
    assert width == 1400  # the height is what the headless window leaves (757 of 900)
    assert right <= width and bottom <= height and overflow <= 0, root
    assert "arm `terse` · haiku against" in dom.split('id="primary"')[1].split("</ul>")[0].replace("<code>", "`").replace("</code>", "`")


def test_error_marker_catches_a_js_error(tmp_path, chromium):
    # The marker the test above relies on does catch errors: break the page on purpose.
    run_dir, records = make_run(tmp_path)
    report.write_reports(run_dir, records)
    page = run_dir / "report.html"
    page.write_text(page.read_text().replace(
        "</body>", "<script>notDefinedAnywhere();</script></body>"))
    assert 'data-js-errors="1"' in html_tag(dump_dom(chromium, page, tmp_path))


def test_report_html_without_matplotlib_in_chromium(tmp_path, chromium, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    run_dir, records = make_run(tmp_path)
    report.write_reports(run_dir, records)
    dom = dump_dom(chromium, run_dir / "report.html", tmp_path)
    assert 'data-report-ready="yes"' in html_tag(dom) and "data-js-errors" not in html_tag(dom)
    assert 'id="plots-missing"' in dom and "pip install matplotlib" in dom
    assert '<table id="comparisons">' in dom


@pytest.mark.parametrize("rehearsal", [True, False])
def test_a_rehearsal_says_so_in_both_reports(tmp_path, rehearsal):
    run_dir, records = make_run(tmp_path)
    for record in records:
        record["rehearsal"] = rehearsal
    markdown, page = (p.read_text() for p in report.write_reports(run_dir, records))
    for text in (markdown, page):
        assert ("REHEARSAL: a scripted model on 127.0.0.1" in text) is rehearsal
    assert "**" not in page  # Markdown emphasis never leaks into the HTML


def test_an_axis_without_a_check_shows_no_rate_in_any_table(tmp_path):
    # Every cell of the run: safe not measured (None), as a task without a safe check gives.
    run_dir, records = make_run(tmp_path)
    records = [dict(r, safe=None) for r in records]
    report.write_reports(run_dir, records)
    md = (run_dir / "summary.md").read_text()
    _, rows = table_rows(md, "t1 · haiku")
    assert [row[3] for row in rows] == ["-", "-"] and rows[1][2] == "4/4 (100%)"
    _, rows = table_rows(md, "Arms against `baseline`, per task (exploratory)")
    by_task = {row[0]: row for row in rows}
    assert by_task["t1"][6:8] == ["-", "-"]  # safe Δ and its p: nothing measured, no test
    assert by_task["t2"][11] == "no clear difference (LOC: no spread in 4 runs against 4: no interval)"
    # The answer per arm names no safe axis: nothing measured on it.
    assert "safe" not in md.split("## The answer per arm")[1].split("_Methods._")[0]
    _, (row,) = table_rows(md, "Arms against `baseline`, pooled over tasks")
    assert row[5:7] == ["-", "-"]
    page = (run_dir / "report.html").read_text()
    assert "<td>1</td><td>-</td><td>-</td>" in page  # the cells table: correct 1, safe and robust '-'
    assert "None" not in page


def test_failure_reasons_are_in_both_reports_per_task_and_arm_most_frequent_first(tmp_path):
    run_dir, records = make_run(tmp_path)
    for r in records:
        if r["task"] == "t1" and r["arm"] == "baseline":  # correct 0/4: every cell failed
            r["failure"] = "incorrect: add(2, 2) returned 5" if r["run"] else "unsafe: '../x' was written outside uploads/"
        elif r["task"] == "t4":
            r["failure"] = "agent never ran properly (cli_error): claude exited with status 1"
    report.write_reports(run_dir, records)
    md = (run_dir / "summary.md").read_text()
    section = md[md.index("## Why cells failed"):md.index("## What the arms") if "## What the arms" in md else None]
    assert "### t1 · baseline: 4 of 4 cells failed\n\n- 3 cells: incorrect: add(2, 2) returned 5\n" \
           "- 1 cell: unsafe: '../x' was written outside uploads/\n" in section
    assert "### t4 · terse: 1 of 1 cells failed\n\n- 1 cell: agent never ran properly (cli_error): " \
           "claude exited with status 1\n" in section
    assert "t2 ·" not in section and "t1 · terse" not in section  # no failed cell there
    page = (run_dir / "report.html").read_text()
    assert ('<h3>t1 · baseline: 4 of 4 cells failed</h3><ul><li>3 cells: incorrect: add(2, 2) returned 5</li>'
            '<li>1 cell: unsafe: &#x27;../x&#x27; was written outside uploads/</li></ul>') in page


def test_every_table_has_as_many_cells_a_row_as_headers_and_scrolls_in_its_own_box(tmp_path):
    from pytest_ponybench.reports import stats, tables

    run_dir, records = make_run(tmp_path)
    arm_stats = stats.arm_stats(records)
    built = [*tables.cell_tables(records, "baseline"), tables.comparison_table(arm_stats),
             tables.pooled_table(arm_stats), tables.consistency_table(arm_stats)]
    for table in built:
        assert table.rows and all(len(row) == len(table.headers) for row in table.rows), table.title
    assert tables.pooled_table(arm_stats).headers[-1] == "runs to detect"
    report.write_reports(run_dir, records)
    page = (run_dir / "report.html").read_text()
    # No table widens the page past a 1400 px window: each scrolls inside its own box.
    assert page.count("<table") == page.count('<div class="scroll"><table') > 0
    assert "div.scroll { max-width: 100%; overflow-x: auto; }" in page
