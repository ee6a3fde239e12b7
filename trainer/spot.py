"""EC2 spot interruption notices via IMDSv2. No TensorFlow here.

IMDSv2: ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``) returns a session token; then
``GET /latest/meta-data/spot/instance-action`` with ``X-aws-ec2-metadata-token`` returns 404 while there is no notice
and ``{"action": "terminate"|"stop"|"hibernate", "time": "..."}`` about two minutes before the interruption.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from trainer.stop import PREEMPTED, StopRequest

LOG = logging.getLogger("trainer.spot")

TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_TTL_S = 21600


@dataclass(frozen=True)
class Notice:
    action: str
    time: str


class Imds:
    """A tiny IMDSv2 client. Token cached until shortly before its TTL ends."""

    def __init__(self, endpoint: str, timeout: float = 1.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self._token: str | None = None
        self._token_at = 0.0

    def token(self) -> str:
        if self._token is None or time.monotonic() - self._token_at > TOKEN_TTL_S - 60:
            request = urllib.request.Request(self.endpoint + TOKEN_PATH, method="PUT",
                                             headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                self._token = response.read().decode().strip()
            self._token_at = time.monotonic()
        return self._token

    def instance_action(self) -> Notice | None:
        """The pending spot notice, or None. Raises OSError when IMDS cannot be reached."""
        request = urllib.request.Request(self.endpoint + ACTION_PATH,
                                         headers={"X-aws-ec2-metadata-token": self.token()})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401:  # token expired or revoked: fetch a new one next time
                self._token = None
            raise
        return parse_notice(body)

    def available(self) -> bool:
        try:
            self.token()
        except OSError:
            return False
        return True


def parse_notice(body: str) -> Notice | None:
    """Decode an instance-action document; None when it is not a notice."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "action" not in data:
        return None
    return Notice(action=str(data["action"]), time=str(data.get("time", "")))


class SpotWatcher:
    """Polls IMDS in a daemon thread; ``notice`` is set once an interruption is announced."""

    def __init__(self, imds: Imds, interval: float = 5.0, on_notice: Callable[[Notice], None] | None = None,
                 probe: bool = False) -> None:
        self.imds = imds
        self.interval = interval
        self.on_notice = on_notice
        self.probe = probe  # first check that IMDS answers at all; stop quietly when it does not
        self.notice: Notice | None = None
        self.event = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spot-watcher", daemon=True)

    def start(self) -> SpotWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def poll_once(self) -> Notice | None:
        try:
            notice = self.imds.instance_action()
        except OSError as exc:
            LOG.debug("IMDS poll failed: %s", exc)
            return None
        if notice is not None and not self.event.is_set():
            self.notice = notice
            LOG.warning("spot interruption notice: %s at %s", notice.action, notice.time)
            if self.on_notice is not None:
                self.on_notice(notice)
            self.event.set()
        return notice

    @property
    def active(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        if self.probe and not self.imds.available():
            LOG.info("no instance metadata service at %s: spot watch off", self.imds.endpoint)
            return
        while not self._stop.is_set() and not self.event.is_set():
            self.poll_once()
            self._stop.wait(self.interval)


def start_watcher(mode: str, endpoint: str, interval: float, stop: StopRequest | None = None) -> SpotWatcher | None:
    """``on``: always watch; ``auto``: watch when IMDS answers (checked in the watcher's thread: a host where
    169.254.169.254 does not answer must not delay the start); ``off``: never. A notice asks ``stop`` to stop
    training (reason ``preempted``)."""
    if mode == "off":
        return None
    LOG.info("watching %s%s every %.1f s%s", endpoint, ACTION_PATH, interval, " if it answers" * (mode == "auto"))
    on_notice = None if stop is None else \
        (lambda notice: stop.request(PREEMPTED, f"spot interruption notice: {notice.action} at {notice.time}"))
    return SpotWatcher(Imds(endpoint), interval, on_notice, probe=mode == "auto").start()
