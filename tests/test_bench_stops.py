"""bench writes its report whole once timing has stopped: a SIGTERM or a
Ctrl-C while it writes (a second `docker compose stop`, an impatient Ctrl-C)
no longer ends the process half-way (a real process, real signals)."""
import signal
import subprocess
import sys
from pathlib import Path

LOADGEN = Path(__file__).resolve().parent.parent / "loadgen"

WRITER = """
import sys
from pathlib import Path
from bench.run import hold_stops_for_the_report
hold_stops_for_the_report()
print("writing", flush=True)
sys.stdin.readline()  # the signals come meanwhile
Path(sys.argv[1]).write_text("the whole report")
"""


def test_stops_while_the_report_is_written_wait_for_it(tmp_path):
    report = tmp_path / "report.md"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(report)], cwd=LOADGEN, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == "writing\n"
        for signum in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
            writer.send_signal(signum)
        writer.stdin.write("go on\n")
        writer.stdin.flush()
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
    assert report.read_text() == "the whole report"
