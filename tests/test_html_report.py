"""index.html rendered from real results.json files (results/example, and
tests/fixtures/compare's, one with a failed case) and checked in headless
Chromium (tests/support/browser_check.py); the checker itself shown to catch a
broken page; results/index.html over a results directory; run.py's
write_pages never raising."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.browser_check import check_page, chromium_binary
from bench import run as bench_run
from bench.report.html import LINKED, render_html, write_page
from bench.measure.flags import BASELINE_MARK, FLAGS
from bench.report.run_index import render_index, write_index
from bench.results import Results

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "results" / "example"
REAL_RUNS = [EXAMPLE / "results.json", *sorted((Path(__file__).parent / "fixtures" / "compare").glob("*.json"))]


@pytest.fixture(scope="module", autouse=True)
def chromium():
    assert chromium_binary(), "Debian's chromium is needed (tools/install/setup.sh installs it)"


def _page(tmp_path: Path, source: Path) -> Path:
    run_dir = tmp_path / (source.parent.name if source.name == "results.json" else source.stem)
    run_dir.mkdir()
    shutil.copy(source, run_dir / "results.json")
    return write_page(run_dir)


@pytest.mark.parametrize("source", REAL_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_runs_page_passes_in_chromium(tmp_path, source):
    assert check_page(_page(tmp_path, source)) == []


def test_failed_case_reads_failed(tmp_path):
    page = _page(tmp_path, REAL_RUNS[1]).read_text()  # flask-killed.json: flask's case failed
    assert '<td data-col="rps">failed</td>' in page


def test_the_checker_catches_a_broken_page(tmp_path):
    page = _page(tmp_path, EXAMPLE / "results.json")
    html = page.read_text()
    first = json.loads((EXAMPLE / "results.json").read_text())["runs"][0]  # nginx-static 1KB c=5: not headline
    top = max(r["concurrency"] for r in json.loads((EXAMPLE / "results.json").read_text())["runs"])
    static = next(r for r in json.loads((EXAMPLE / "results.json").read_text())["runs"]
                  if (r["target"], r["file"], r["concurrency"]) == ("nginx-static", first["file"], top))
    wrong = html.replace(f'data-col="rps">{static["rps"]:.0f}<', 'data-col="rps">1<', 1)
    assert wrong != html
    broken = (wrong.replace("</body>", '<script>console.error("boom"); undefined.x;</script>'
                            '<div style="width:2000px">wide</div>'
                            '<img src="https://example.invalid/x.png"></body>')
              .replace('class="mark', 'class="nomark'))
    page.write_text(broken)
    problems = "\n".join(check_page(page))
    assert "console error: boom" in problems
    assert "uncaught exception" in problems
    assert "390 px: the page overflows horizontally" in problems
    assert "fetched at view time: https://example.invalid/x.png" in problems
    assert "not drawn (0 marks" in problems
    assert f"('nginx-static', '{first['file']}', {top}) rps: page shows '1'" in problems


def test_every_flag_mark_has_a_glyph_in_debian_s_default_font():
    """Chromium with Debian's fonts (DejaVu, fontconfig's first choice)
    drew the stopwatch and hourglass marks as empty boxes: no emoji font."""
    for flag, mark in [*((f.name, f.mark) for f in FLAGS.values()), ("baseline flagged", BASELINE_MARK)]:
        fonts = subprocess.run(["fc-list", f":family=DejaVu Sans:charset={ord(mark):x}", "family"],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        assert fonts.strip(), f"{flag}: {mark!r} (U+{ord(mark):04X}) has no glyph in DejaVu Sans"


def test_committed_example_page_is_the_renderer_output():
    """results/example/index.html is committed: it must be what the renderer
    makes of results/example/results.json today."""
    results = Results.load(EXAMPLE / "results.json")
    linked = tuple(name for name in LINKED if (EXAMPLE / name).exists())
    assert (EXAMPLE / "index.html").read_text() == render_html(results, linked, False), (
        "re-render it (and index.png): PYTHONPATH=tests .venv/bin/python -c \""
        "from pathlib import Path; from bench.report.html import write_page; "
        "from support.browser_check import check_page; p = Path('results/example'); "
        "print(check_page(write_page(p, all_runs=False), screenshot=p / 'index.png'))\"")


def test_run_index_lists_every_run(tmp_path):
    for source in REAL_RUNS[:3]:
        _page(tmp_path, source)
    (tmp_path / "resilience-20261124T000000Z").mkdir()
    (tmp_path / "resilience-20261124T000000Z" / "results.json").write_text(json.dumps(
        {"run_id": "r", "env_file": "local.env", "started": "2026-11-24T00:00:00+00:00", "settings": {},
         "resilience": [{"verdict": "right"}, {"verdict": "wrong: hung"}]}))
    (tmp_path / "latest").symlink_to("example")
    env = tmp_path / "defaults.env"
    env.write_text("# comment\nBENCH_DURATION=4\nBENCH_CONCURRENCY=5 100\n")
    html = render_index(tmp_path, env)
    assert html.count("<tr class=") == 4  # three runs and the resilience run; latest is not a second row
    assert 'href="example/index.html"' in html and 'href="flask-killed/index.html"' in html
    assert "resilience: 2 rows, 1 judged right" in html
    assert "<code>BENCH_DURATION=2</code>" in html  # flask-killed ran 2 s against the defaults' 4
    assert "<code>BENCH_CONCURRENCY=5</code>" in html
    assert "the fastest path after nginx-static was <strong>httpd-static</strong>" in html
    assert 'class="failed"' in html  # flask-killed has a failed case
    path = write_index(tmp_path, env)
    assert check_page(path, results_json=False) == []


def test_write_pages_never_raises(tmp_path, monkeypatch, capsys):
    results = Results.load(EXAMPLE / "results.json")
    run_dir = tmp_path / results.run_id
    run_dir.mkdir()
    bench_run.write_pages(results, run_dir, tmp_path)
    assert {p.name for p in run_dir.iterdir()} >= {"index.html", "results.csv", "bencher.json",
                                                    "github-benchmark-bigger.json", "github-benchmark-smaller.json"}
    assert (tmp_path / "index.html").exists()

    def broken(*_):
        raise ValueError("renderer broke")
    monkeypatch.setattr("bench.report.html.render_html", broken)
    bench_run.write_pages(results, run_dir, tmp_path)
    assert "index.html not written: ValueError: renderer broke" in capsys.readouterr().out


def test_a_resilience_runs_page(tmp_path):
    """tools/lab/resilience.py's results.json: its table on a page of its own."""
    run_dir = tmp_path / "resilience-20261124T000000Z"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(
        {"run_id": "resilience-x", "env_file": "local.env", "started": "a", "finished": "b",
         "settings": {"file": "1KB.bin", "rate": 100, "seconds": 30, "fault_at": 10, "pause_s": 10},
         "server": {"product": "FerretDB", "version": "v1.24.2", "backend": "PostgreSQL"}, "resilience": [],
         "failed": [{"path": "node", "database": "mongo", "fault": "restart", "error": "no answer within 240 s"}]}))
    page = write_page(run_dir)
    html = page.read_text()
    assert "<td>not measured: no answer within 240 s</td>" in html
    assert "Resilience: serving paths while their database restarts or pauses" in html
    assert check_page(page, results_json=False) == []
