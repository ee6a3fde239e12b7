"""`make test`: the whole suite as two pytest processes side by side (2 cores; half of the suite's time is waiting).

    python tools/suite.py [PYTEST_ARGS...]

With no test path in the arguments, runs
  * the main stream: unit, integration, and the lab tests not listed below (live on the terminal), and
  * the side stream: SIDE, the tests of the shared flow lab and the autostop lab (its own log, printed when done),
at once, each with the same arguments (-k, --durations, ...). The split keeps apart what must not overlap: every
user of the session-scoped flow lab is in one process (a second process would boot a second lab of the same name),
and nothing in SIDE runs `make`, Terraform or the AWS twin, which share the checkout's state with the main stream.
tests/unit/test_suite_streams.py proves that every test module using the flow lab is in SIDE.

With a test path among the arguments (`make test PYTEST_ARGS=tests/unit`), one pytest runs exactly what was asked.
The exit status is the first failing stream's; a stream that selected no test (pytest's 5) fails the run unless the
other stream ran tests (a -k that matches tests of one stream only).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Test modules of the side stream: each uses the session fixture flow_lab (tests/lab/conftest.py), or, for
# test_autostop.py, is a lab of its own that spends its minutes waiting for hosts to power off.
SIDE = ("tests/lab/test_autostop.py", "tests/lab/test_deploy_lab.py", "tests/lab/test_job_flows.py",
        "tests/lab/test_flow_faults.py", "tests/lab/test_flow_onprem.py", "tests/lab/test_flow_preflight.py",
        "tests/lab/test_flow_ps.py")
NO_TESTS = 5  # pytest: no test was collected or selected
SIDE_LOG = REPO / ".cache" / "test-logs" / "side.log"


def has_test_path(args: Sequence[str]) -> bool:
    """Whether the arguments name tests (a path or node id) rather than only options like -k EXPR."""
    takes_value = {"-k", "-m", "-p", "-c", "-o", "--rootdir", "--basetemp", "--deselect", "--ignore", "--timeout",
                   "--durations", "--maxfail", "--tb", "-W", "--junitxml", "--confcutdir"}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif not arg.startswith("-"):
            return True
    return False


def main_argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *(f"--ignore={path}" for path in SIDE), *args]


def side_argv(args: Sequence[str]) -> list[str]:
    # No cache plugin: the main stream owns .pytest_cache (--lf, --sw); two writers would clobber it.
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SIDE, *args]


def combined(main_rc: int, side_rc: int) -> int:
    """One exit status for both streams."""
    if main_rc == side_rc == NO_TESTS:
        return NO_TESTS
    for rc in (main_rc, side_rc):
        if rc not in (0, NO_TESTS):
            return rc
    return 0


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a stream left running by an interrupted main stream. A Ctrl-C reached it too: give it a minute to tear
    its labs down, then SIGINT (pytest still runs the finalizers), then SIGTERM two minutes later."""
    for sig, grace in ((None, 60), (signal.SIGINT, 120), (signal.SIGTERM, None)):
        if proc.poll() is not None:
            return
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


def run_streams(args: Sequence[str]) -> int:
    SIDE_LOG.parent.mkdir(parents=True, exist_ok=True)
    print(f"[test] two pytest processes: the main stream here, the side stream ({len(SIDE)} lab modules) "
          f"beside it, logged to {SIDE_LOG.relative_to(REPO)} and printed when both are done", flush=True)
    with open(SIDE_LOG, "wb") as log:
        side = subprocess.Popen(side_argv(args), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            main_rc = subprocess.run(main_argv(args), cwd=REPO, check=False).returncode
            side_rc = side.wait()
        finally:
            stop(side)
    sys.stdout.write(f"\n[test] ===== side stream ({', '.join(Path(p).name for p in SIDE)}) =====\n")
    sys.stdout.flush()
    sys.stdout.buffer.write(SIDE_LOG.read_bytes())
    # Each stream's own summary line above says how long it took (the side one usually ends first).
    print(f"\n[test] main stream: exit {main_rc}; side stream: exit {side_rc} (log {SIDE_LOG.relative_to(REPO)})",
          flush=True)
    return combined(main_rc, side_rc)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if has_test_path(args):
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, check=False).returncode
    return run_streams(args)


if __name__ == "__main__":
    sys.exit(main())
