"""A run's index.html checked in a real browser: Debian's headless Chromium
driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages, NUL-separated, on fds 3 and 4), so no websocket client is needed.

check_page(path) -> problems, empty when the page is right: no console
error or uncaught exception, nothing fetched but the file itself, every
chart drawn (an SVG with marks and a size), the headline table's figures
equal to those computed here from results.json beside the page, and no
horizontal overflow of the body at 1280 and 390 px. The end-to-end test
can call it on a tiny real run's page."""
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

WIDTHS = (1280, 390)
TIMEOUT = 30.0


def chromium_binary() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome")
                 if (found := shutil.which(name))), None)


class Browser:
    """One headless Chromium and one page (a target attached in flat mode)."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="browser-check-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds_3_and_4():  # Chromium reads commands on fd 3 and answers on fd 4
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--disable-gpu", "--no-sandbox", "--remote-debugging-pipe", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=fds_3_and_4)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._id, self._answers, self.events = 0, {}, []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _read(self):
        buf = b""
        while chunk := os.read(self._from_chrome, 1 << 20):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._cond:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._cond.notify_all()

    def call(self, method: str, session: bool = False, **params) -> dict:
        with self._cond:
            self._id += 1
            n = self._id
        msg = {"id": n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: n in self._answers, TIMEOUT):
                raise TimeoutError(f"Chromium did not answer {method}")
            answer = self._answers.pop(n)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def wait_for_event(self, method: str, since: int) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: any(e["method"] == method for e in self.events[since:]), TIMEOUT):
                raise TimeoutError(f"no {method} within {TIMEOUT:g} s")

    def open(self, url: str, width: int, height: int = 900) -> None:
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 500)
        since = len(self.events)
        self.call("Page.navigate", session=True, url=url)
        self.wait_for_event("Page.loadEventFired", since)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating in the page: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def screenshot(self, path: Path, width: int, height: int) -> None:
        import base64
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        time.sleep(0.2)  # a layout pass at the new size
        shot = self.call("Page.captureScreenshot", session=True, format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self):
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        shutil.rmtree(self.profile, ignore_errors=True)


# What the page shows, read in the page itself.
READ_PAGE = """JSON.stringify({
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  bodyOverflow: document.body.scrollWidth - document.body.clientWidth,
  charts: [...document.querySelectorAll('svg.chart')].map(s => ({
    label: s.getAttribute('aria-label'), marks: s.querySelectorAll('.mark').length,
    width: s.getBoundingClientRect().width, height: s.getBoundingClientRect().height})),
  headline: [...document.querySelectorAll('#headline tbody tr')].map(tr => ({
    target: tr.dataset.target, file: tr.dataset.file, concurrency: +tr.dataset.concurrency,
    cells: Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map(td =>
      [td.dataset.col, td.textContent.trim()]))})),
})"""


def _cpu_ms(run: dict) -> float | None:
    used = (run.get("cpu") or {}).get(run["target"])
    return used.get("cpu_ms_per_request") if used else None


def _rep_cpu_ms(rep: dict, target: str) -> float | None:
    used = (rep.get("cpu") or {}).get(target)
    return used.get("cpu_ms_per_request") if used else None


def _rep_rps(rep: dict, _target: str) -> float | None:
    return rep.get("rps")


def _round_ratio(run: dict, base: dict | None, value, bounded: bool = False) -> str:
    """The centre the page prints: exp(mean log(path / baseline)) over the
    rounds both were counted in; "≤ " where most of the baseline's rounds
    were bound by the load generator or a shared core (req/s only)."""
    if run["target"] == "nginx-static" or base is None:
        return "-" if base is None else "1.00"
    of_base = {r.get("round"): r for r in base["repetitions"]}
    logs = [math.log(a / b) for rep in run["repetitions"] if (other := of_base.get(rep.get("round")))
            for a, b in [(value(rep, run["target"]), value(other, "nginx-static"))] if a and b]
    if not logs:
        return "-"
    bound = bounded and any(
        2 * sum(flag in (r.get("flags") or ()) for r in base["repetitions"]) > len(base["repetitions"])
        for flag in ("loadgen-bound", "core-saturated"))
    # results.json keeps the ratio to 4 places; the page prints that to 2
    return ("≤ " if bound else "") + f"{round(math.exp(sum(logs) / len(logs)), 4):.2f}"


def _window_ratio(windows: list[dict], target: str, file: str) -> str:
    """BENCH_CPU_DESIGN=same-moment: the centre over the windows of `file`
    in which both the path and nginx-static have a figure (not excluded)."""
    def cpu(window: dict, name: str) -> float | None:
        found = window["targets"].get(name) or {}
        return None if found.get("excluded") else found.get("cpu_ms_per_request")
    logs = [math.log(a / b) for w in windows if w["file"] == file
            for a, b in [(cpu(w, target), cpu(w, "nginx-static"))] if a and b]
    return f"{round(math.exp(sum(logs) / len(logs)), 4):.2f}" if logs else "-"


def expected_headline(results: dict) -> dict[tuple, dict]:
    """The headline's figures computed from results.json here, not by the
    renderer's code: (target, file, concurrency) -> column -> text."""
    if not results.get("runs"):
        return {}
    c = max(r["concurrency"] for r in results["runs"])
    runs = {(r["target"], r["file"]): r for r in results["runs"] if r["concurrency"] == c}
    loops = {(o["target"], o["file"]): o for o in results.get("open_loop", [])}
    out = {}
    for (target, file), run in runs.items():
        if run["status"] != "ok":
            out[(target, file, c)] = {"rps": "failed"}
            continue
        base = runs.get(("nginx-static", file))
        base = base if base and base["status"] == "ok" else None
        if results.get("rounds"):  # the geometric mean of the rounds' ratios, paired by round
            row = {"rps": f"{run['rps']:.0f}", "rps-ratio": _round_ratio(run, base, _rep_rps, bounded=True),
                   "cpu-ratio": _round_ratio(run, base, _rep_cpu_ms)}
            if results["rounds"].get("cpu_design") == "same-moment" and target != "nginx-static":
                row["cpu-ratio"] = _window_ratio(results["rounds"].get("cpu_windows") or [], target, file)
        else:
            ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}"  # noqa: E731
            row = {"rps": f"{run['rps']:.0f}", "rps-ratio": ratio(run["rps"], base and base["rps"]),
                   "cpu-ratio": ratio(_cpu_ms(run), base and _cpu_ms(base))}
        loop = loops.get((target, file))
        row["p99"] = ("-" if loop is None else "failed" if loop["status"] != "ok"
                      else f"{loop['p99_ms']:.2f} @ {loop['rate']:.0f}/s")
        out[(target, file, c)] = row
    return out


def _headline_problems(shown: list[dict], results: dict) -> list[str]:
    expected = expected_headline(results)
    problems = []
    if len(shown) != len(expected):
        problems.append(f"headline has {len(shown)} rows, results.json {len(expected)} cases at its top concurrency")
    for row in shown:
        key = (row["target"], row["file"], row["concurrency"])
        want = expected.get(key)
        if want is None:
            problems.append(f"headline row {key} is not in results.json")
            continue
        for col, text in want.items():
            got = row["cells"].get(col, "")
            # a ratio taken against a flagged baseline carries a dagger; open-loop p99 its flags' marks
            if not (got == text or (col != "rps" and got.startswith(text) and not got[len(text):][:1].isdigit())):
                problems.append(f"headline {key} {col}: page shows {got!r}, results.json gives {text!r}")
    return problems


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            out.append(f"uncaught exception: {p['exceptionDetails'].get('text')}")
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"browser error: {p['entry']['text']} {p['entry'].get('url', '')}".strip())
        elif e["method"] == "Network.requestWillBeSent":
            url = p["request"]["url"]
            if not url.startswith(("file:", "data:", "about:")):
                out.append(f"fetched at view time: {url}")
    return out


def check_page(path, screenshot: Path | None = None, results_json: Path | None | bool = None) -> list[str]:
    """Problems with the page at path (index.html), [] when none; with
    screenshot, a 1280 px wide PNG of its first screens is written there.
    The headline is checked against results_json (default: the one beside
    the page); results_json=False checks a page without one (results/index.html)."""
    path = Path(path).resolve()
    binary = chromium_binary()
    if binary is None:
        return ["no Chromium found (tools/install/setup.sh installs Debian's chromium)"]
    problems, results = [], None
    if results_json is not False:
        results_json = Path(results_json or path.parent / "results.json")
        if results_json.exists():
            results = json.loads(results_json.read_text())
        else:
            problems.append(f"no {results_json} to check the headline against")
    browser = Browser(binary)
    try:
        for width in WIDTHS:
            since = len(browser.events)
            browser.open(path.as_uri(), width)
            page = json.loads(browser.evaluate(READ_PAGE))
            problems += [f"{width} px: {p}" for p in _errors(browser.events[since:])]
            if page["overflow"] > 0 or page["bodyOverflow"] > 0:
                problems.append(f"{width} px: the page overflows horizontally by "
                                f"{max(page['overflow'], page['bodyOverflow'])} px")
            if results and results.get("runs") and not page["charts"]:
                problems.append(f"{width} px: no chart on the page")
            for chart in page["charts"]:
                if chart["marks"] == 0 or chart["width"] < 100 or chart["height"] < 30:
                    problems.append(f"{width} px: chart {chart['label']!r} not drawn ({chart['marks']} marks, "
                                    f"{chart['width']:.0f}x{chart['height']:.0f} px)")
            if results is not None and width == WIDTHS[0]:
                problems += _headline_problems(page["headline"], results)
        if screenshot:
            browser.open(path.as_uri(), 1280)
            browser.screenshot(Path(screenshot), 1280, 2400)
    finally:
        browser.close()
    return problems
