"""Command line of the lab tool.

    python -m lab setup                      install debootstrap/systemd-container/nftables, build + cache the rootfs
    python -m lab up [--hosts 3 | --slots chief,ps,worker,worker] [--name tfclab] [--bind-ro PATH] [--bind PATH]
    python -m lab status [--json]            hosts, addresses, link, SSH, memory
    python -m lab ssh HOST [COMMAND...]       root shell / command on a host
    python -m lab cut HOST | restore HOST    take a host's link down / up
    python -m lab reboot HOST                reboot a host and wait until it is back
    python -m lab rekey HOST                 give a host a new SSH host key (a changed host)
    python -m lab isolate | rejoin           (a lab up with --bastion NAME) hosts only through the bastion / again
    python -m lab env                        TFCLUSTER_SOURCE/TFCLUSTER_HOSTS_FILE for the inventory
    python -m lab down [--all]               stop everything; safe to re-run

Environment: TFCLUSTER_LAB_DIR (default .cache/lab in the repo), TFCLUSTER_LAB_MIRROR (Debian mirror for the
rootfs build, default http://deb.debian.org/debian). Exit codes: 0 ok, 1 the lab failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lab.admin import leftovers, running_labs, setup
from lab.config import DEFAULT_LAB, DEFAULT_PORT, LabError, default_slots, parse_slots
from lab.lab import Lab
from lab.paths import default_lab_dir

log = logging.getLogger("lab")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="A lab of real hosts "
                                     "(systemd-nspawn on a private bridge) for tfcluster's multi-host tests.")
    parser.add_argument("--lab-dir", type=Path, default=None, help="cache + state directory (default: "
                        "$TFCLUSTER_LAB_DIR or .cache/lab in the repo)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("setup", help="install packages, build and cache the rootfs and SSH key (idempotent)")
    p.add_argument("--mirror", default=None, help="Debian mirror for debootstrap")
    p.add_argument("--rebuild", action="store_true", help="build the rootfs again even if cached")
    sub.add_parser("build", help="same as setup")

    p = sub.add_parser("up", help="boot a lab and wait until every host answers SSH")
    _lab_arg(p)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--hosts", type=int, default=3, help="a chief and N-1 workers (default 3)")
    group.add_argument("--slots", default=None, help="task type per host, e.g. chief,ps,worker,worker")
    p.add_argument("--names", default=None, help="host names, comma separated (default: TYPE-INDEX)")
    p.add_argument("--subnet", default=None, help="private /24 for the bridge (default: first free 10.247.N.0/24)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"training port of each host ({DEFAULT_PORT})")
    p.add_argument("--bind-ro", action="append", default=[], metavar="PATH",
                   help="bind PATH read-only at the same path into every host (e.g. the project venv)")
    p.add_argument("--bind", action="append", default=[], metavar="PATH|SRC:DEST",
                   help="bind a directory read-write into every host (one directory they all share, like NFS)")
    p.add_argument("--bastion", default=None, metavar="NAME",
                   help="add a jump host NAME with a leg on a front bridge (then `isolate` the lab)")

    p = sub.add_parser("down", help="stop the lab and remove everything it made (safe to re-run)")
    _lab_arg(p)
    p.add_argument("--all", action="store_true", help="every lab found on this machine")

    p = sub.add_parser("status", help="hosts, addresses, link state, SSH, memory")
    _lab_arg(p)
    p.add_argument("--json", action="store_true")

    for name, text in (("cut", "take the host's link down"), ("restore", "bring the host's link back up"),
                       ("reboot", "reboot the host and wait until it is back"),
                       ("rekey", "give the host a new SSH host key (prints it)")):
        p = sub.add_parser(name, help=text)
        _lab_arg(p)
        p.add_argument("host")

    for name, text in (("isolate", "take the control machine off the lab bridge (reach hosts via the bastion)"),
                       ("rejoin", "undo isolate")):
        _lab_arg(sub.add_parser(name, help=text))

    p = sub.add_parser("ssh", help="ssh to a host as root (a command, or an interactive shell)")
    _lab_arg(p)
    p.add_argument("host")
    p.add_argument("remote", nargs=argparse.REMAINDER, help="command to run")

    p = sub.add_parser("env", help="print shell exports for the inventory's static source")
    _lab_arg(p)
    p = sub.add_parser("leftovers", help="list anything a lab left behind (exit 1 if any)")
    return parser


def _lab_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=DEFAULT_LAB, help=f"lab name (default {DEFAULT_LAB})")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s lab: %(message)s", datefmt="%H:%M:%S")
    try:
        return _dispatch(args)
    except LabError as exc:
        log.error("%s", exc)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    lab_dir: Path = args.lab_dir or default_lab_dir()
    cmd = args.command
    if cmd in ("setup", "build"):
        setup(lab_dir, mirror=getattr(args, "mirror", None), rebuild=getattr(args, "rebuild", False))
        return 0
    if cmd == "up":
        return _up(args, lab_dir)
    if cmd == "down":
        names = running_labs(lab_dir) if args.all else [args.name]
        for name in names:
            Lab(name=name, lab_dir=lab_dir).down()
        return 0
    if cmd == "leftovers":
        found = leftovers(lab_dir)
        print("\n".join(found) if found else "nothing left")
        return 1 if found else 0
    lab = Lab.attach(args.name, lab_dir)
    if cmd == "ssh":
        argv = lab.ssh_argv(args.host) + list(args.remote)
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    ON_LAB[cmd](lab, args)
    return 0


def _env(lab: Lab, _args: argparse.Namespace) -> None:
    for key, value in lab.inventory_env().items():
        print(f"export {key}={value}")


# Commands on a running lab: (lab, args) -> None.
ON_LAB: dict[str, Callable[[Lab, argparse.Namespace], object]] = {
    "status": lambda lab, args: _print_status(lab, as_json=args.json),
    "cut": lambda lab, args: lab.cut(args.host),
    "restore": lambda lab, args: lab.restore(args.host),
    "reboot": lambda lab, args: lab.reboot(args.host),
    "rekey": lambda lab, args: print(lab.rekey(args.host)),
    "isolate": lambda lab, _args: lab.isolate(),
    "rejoin": lambda lab, _args: lab.rejoin(),
    "env": _env,
}


def _up(args: argparse.Namespace, lab_dir: Path) -> int:
    try:
        slots = parse_slots(args.slots) if args.slots else default_slots(args.hosts)
    except LabError as exc:
        log.error("%s", exc)
        return 2
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    lab = Lab(slots=slots, name=args.name, names=names, subnet=args.subnet, port=args.port,
              bind_ro=args.bind_ro, bind=args.bind, lab_dir=lab_dir, bastion=args.bastion)
    try:
        lab.start()
    except LabError as exc:
        log.error("%s", exc)
        lab.down()
        return 1
    except BaseException:
        lab.down()
        raise
    _print_status(lab, as_json=False)
    print(f"\nhost file: {lab.hosts_file}\nssh:       ssh -F {lab.ssh_config} HOST")
    print(f"boot:      {lab.boot_seconds:.1f} s")
    return 0


def _print_status(lab: Lab, as_json: bool) -> None:
    rows = lab.status()
    if as_json:
        spec = lab._spec()
        doc = {"lab": lab.paths.lab, "bridge": spec.bridge, "subnet": spec.subnet, "hosts_file": str(lab.hosts_file),
               "ssh_config": str(lab.ssh_config), "private_key": str(lab.private_key),
               "known_hosts": str(lab.known_hosts), "hosts": rows}
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    spec = lab._spec()
    print(f"lab {spec.name}: bridge {spec.bridge} {spec.subnet} (control machine {spec.control_address})")
    print(f"{'HOST':<12} {'ADDRESS':<15} {'SLOT':<12} {'RUNNING':<8} {'LINK':<5} {'SSH':<5} {'MEM MiB':>8} BOOTS")
    for r in rows:
        print(f"{r['name']!s:<12} {r['address']!s:<15} {r['slot']!s:<12} {r['running']!s:<8} {r['link']!s:<5} "
              f"{r['ssh']!s:<5} {r['memory_mib']!s:>8} {r['boots']}")
