"""Every task's Python stacks, read from the hosts (``python3 -m tfcluster.host.stacks``: py-spy, no help from the
task) when the wait decides a job stalled or hangs, and on `make stacks`. Each host's answer is data: read bounded
(tfcluster.run.bounded), parsed as one JSON line, its text escaped and cut to STACK_LINES lines per task before it
is shown. The task that is behind comes first (:func:`order`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tfcluster.core.text import printable, printable_lines
from tfcluster.host import stacks as host_stacks
from tfcluster.host.jobspec import JobError
from tfcluster.run.bounded import read_bounded
from tfcluster.run.reach import Reach, ReachError

STACK_LINES = 80  # lines of one task's stacks shown
TIMEOUT = host_stacks.PYSPY_TIMEOUT + 30.0  # seconds one host's answer may take (ssh, Python's start, py-spy)


def words(target: Mapping[str, Any]) -> list[str]:
    """The command a host runs: the release's stacks reader on the task's spec."""
    argv = ["env", f"PYTHONPATH={target['pythonpath']}", str(target["python"]), "-m", "tfcluster.host.stacks",
            str(target["spec"])]
    return argv + (["--unit", str(target["unit"])] if target.get("unit") else [])


def parse(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """A host's answer, any text: {"pid", "stacks", "error"} with strings and an int or None only."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return {"pid": None, "stacks": "", "error": f"rc={returncode}: {(stderr or stdout).strip()[-400:]}"}
    pid = data.get("pid")
    return {"pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            "stacks": data.get("stacks") if isinstance(data.get("stacks"), str) else "",
            "error": data.get("error") if isinstance(data.get("error"), str) else None}


def read(target: Mapping[str, Any]) -> dict[str, Any]:
    """One task's stacks: in this process for a local slot, else over the host's own ssh."""
    try:
        reach = Reach.from_info(target["reach"])
        if reach.local:
            return host_stacks.stacks(str(target["spec"]), target.get("unit") or None)
        code, out, err, _ = read_bounded(reach.argv(words(target)), TIMEOUT)
    except (ReachError, KeyError, TypeError, ValueError, JobError, OSError) as error:
        return {"pid": None, "stacks": "", "error": f"cannot read it: {error}"}
    except subprocess.TimeoutExpired:
        return {"pid": None, "stacks": "", "error": f"no answer within {TIMEOUT:.0f} s"}
    return parse(code, out, err)


def gather(targets: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every task's stacks at once (a thread per host), in the targets' order."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets)))) as pool:
        found = dict(zip(targets, pool.map(read, targets.values()), strict=True))
    return {host: found[host] for host in targets}


def order(hosts: Sequence[str], seen: Mapping[str, Any], culprit: str | None) -> list[str]:
    """The task behind first: the culprit, then by how long ago each made its last step, on its own host's clock
    (``step_age``; a task that never stepped first), then slot order."""
    def age(host: str) -> float:
        entry = seen.get(host)
        value = entry.get("step_age") if isinstance(entry, Mapping) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("inf")

    rest = sorted((h for h in hosts if h != culprit), key=lambda h: (-age(h), list(hosts).index(h)))
    return ([culprit] if culprit in hosts else []) + rest


def lines(found: Mapping[str, Mapping[str, Any]], slots: Mapping[str, str], first: Sequence[str],
          behind: str | None) -> list[str]:
    """What the terminal shows: per task a header, its escaped stacks (at most STACK_LINES lines) or the error."""
    out: list[str] = []
    for host in first:
        answer = found.get(host) or {}
        mark = ", behind" if host == behind else ""
        out.append(f"--- {printable(host, 80)} ({printable(slots.get(host, '?'), 40)}), pid "
                   f"{answer.get('pid') or '-'}{mark} ---")
        if answer.get("error"):
            out.append(f"  cannot read its stacks: {printable(answer['error'], 400)}")
        text = [line for line in str(answer.get("stacks") or "").splitlines() if line.strip()]
        out += [f"  {line}" for line in printable_lines(text[:STACK_LINES], 300)]  # the innermost frames first
        if len(text) > STACK_LINES:
            out.append(f"  ... {len(text) - STACK_LINES} more lines not shown")
    return out
