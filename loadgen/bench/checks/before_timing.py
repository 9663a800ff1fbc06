"""Before timing: every target answers, serves the manifest's bytes, and
answers HTTP as the reference (nginx-static) does."""
import time
from dataclasses import asdict

from . import conformance
from ..progress import say
from ..results import TargetResult
from .verify import VerificationError, verify_target, wait_until_healthy


def verify_targets(cfg, files: list[dict]) -> list[TargetResult]:
    deadline = time.monotonic() + cfg.startup_timeout
    checked = []
    for name in cfg.targets:
        url = cfg.url_of(name)
        try:
            wait_until_healthy(url, deadline)
            server = verify_target(url, files)
            checked.append(TargetResult(name, url, True, server_header=server))
            say(f"{name}: verified {len(files)} files (sha256, Content-Length, 404)")
        except (VerificationError, OSError) as e:
            checked.append(TargetResult(name, url, False, error=str(e)))
            say(f"{name}: FAILED verification, will not be timed: {e}")
    return checked


def check_all_conformance(cfg, targets: list[TargetResult], files: list[dict]) -> None:
    reference = next((t for t in targets if t.name == cfg.reference and t.verified), None)
    if reference is None:
        say(f"conformance not checked: the reference {cfg.reference} is not among the verified targets")
        return
    for target in targets:
        if target.verified:
            check_conformance(cfg, reference, target, files)


def check_conformance(cfg, reference: TargetResult, target: TargetResult, files: list[dict]) -> None:
    """Judges every HTTP answer against the reference's; a target that fails
    is not timed unless BENCH_ALLOW_NONCONFORMING, and then its rows are marked."""
    cases = conformance.check(reference.url, target.url, files,
                              bad_documents=conformance.serves_gridfs(target.name))
    target.conformance = [asdict(c) for c in cases]
    failed = [c for c in cases if not c.passed]
    target.conforming = not failed
    say(f"{target.name}: conformance {len(cases) - len(failed)} passed, {len(failed)} failed"
        + "".join(f"\n    FAIL {c.case}: expected {c.expected}; got {c.got}" for c in failed[:10]))
    if failed and not cfg.allow_nonconforming:
        target.verified = False
        target.error = (f"{len(failed)} of {len(cases)} conformance cases failed (first: {failed[0].case}); "
                        f"set BENCH_ALLOW_NONCONFORMING=1 to time it anyway")
