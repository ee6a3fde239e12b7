"""A lost host replaced alone, and the job resumed (`make train RECOVER=N`; docs/jobs.md "A lost host").

When a train fails and the kind owns its hosts (CLUSTER=aws), the kind says which slots lost their instance (a spot
interruption, a termination, failing status checks). With a recovery left, each lost slot's instance alone is
replaced (Terraform), and the train runs again: the prepare stage prepares the new host, and the others again only
as far as the new address reaches (their firewall; their runtimes are in place), and the job starts again from the
newest backup every task agrees on. Each recovery goes to the job's ledger and the terminal: the slot, why, how long
until the job trained again, the steps lost. Without a recovery left (RECOVER=0, or spent), the failure names the
lost slot and the command that recovers. A kind whose hosts tfcluster does not own (onprem, local) names the lost
host and the command that resumes the job once the host is back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfcluster.collect import ledger
from tfcluster.core.text import printable
from tfcluster.kinds import KindError
from tfcluster.run.view import progress_steps


def budget(settings: Any) -> int:
    """RECOVER, else the kind's default (1 on a spot cluster, 0 elsewhere)."""
    return settings.recover if settings.recover is not None else settings.kind.recover_default(settings.target)


def intro(settings: Any, left: int) -> str:
    """What `make train` says at its start about lost hosts."""
    if not settings.kind.has_instances:
        return ""
    if left > 0:
        return (f"recovery: RECOVER={left}: a lost host's instance is replaced alone and the job resumes from its "
                "backups")
    return "recovery: off (RECOVER=0): a lost host fails the job, naming the command that replaces it"


def resumed_steps(tasks: Sequence[Mapping[str, Any]], trained: int | None) -> int | None:
    """Steps lost: ``trained`` before the loss, less where the job stood at its first report after it resumed."""
    again = progress_steps(tasks)
    return None if trained is None or again is None else max(0, trained - again)


def recover(cmd: Any, run: str, train: Callable[[], int]) -> int:
    """After a failed ``train()`` (see the module docstring): replace each lost slot and train again, up to the
    budget; the last train's exit status."""
    s, left, code = cmd.s, budget(cmd.s), 1
    while True:
        try:
            lost = s.kind.lost_slots(s.target)
        except (KindError, OSError, ValueError) as exc:  # EC2 unreachable: say so, the failure stands
            cmd.say(f"could not check the cluster's instances after the failure ({printable(exc, 300)})")
            return code
        if not lost:
            return code
        named = ", ".join(f"{slot} ({printable(why, 200)})" for slot, why in lost.items())
        if left <= 0:
            cmd.say(f"lost: {named}. Fix: make train RECOVER=1 replaces {'them' if len(lost) > 1 else 'it'} alone "
                    "and resumes the job from its backups")
            return code
        trained, started = cmd.view.furthest, time.monotonic()
        for slot, why in lost.items():
            cmd.say(f"recovering {slot}: its instance is {printable(why, 200)}; replacing it alone")
            for line in s.kind.replace_slot(s.target, slot):
                cmd.say(f"       {printable(line, 500)}")
        left -= 1
        cmd.view.first_training, cmd.view.first_training_at = [], None
        code = train()
        again = cmd.view.first_training_at
        seconds = round(again - started, 1) if again is not None else None
        lost_steps = resumed_steps(cmd.view.first_training, trained)
        for slot, why in lost.items():
            ledger.record_recovery(cmd.job_dir, run, {"slot": slot, "why": why, "seconds": seconds,
                                                      "steps_lost": lost_steps, "at": round(time.time(), 3)})
        cmd.say(f"recovery of {', '.join(lost)}: " + (f"training again {seconds:.0f} s after the loss was found"
                                                     if seconds is not None else "the job did not train again")
                + f"; steps lost: {'unknown' if lost_steps is None else lost_steps}")
        if code == 0:
            return code
