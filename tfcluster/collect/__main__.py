"""The collector's command, run by the collector role on the control machine:

    python -m tfcluster.collect pull < REQUEST.json     # from the chief (one tar stream over one SSH connection)
    python -m tfcluster.collect s3 < REQUEST.json       # from the job's S3 prefix when the chief is gone
    python -m tfcluster.collect verify DIR              # DONE present and every sha256 of its manifest

One JSON line on stdout: the result, or ``{"failed": true, "msg": ...}`` with exit 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from tfcluster.collect.s3 import pull_s3
from tfcluster.collect.ssh import pull
from tfcluster.collect.transfer import CollectError
from tfcluster.core.files import ManifestError, verify_dir


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) == 2 and args[0] == "verify":
            result: dict[str, Any] = {"verified": verify_dir(args[1]), "dir": args[1]}
        elif args in (["pull"], ["s3"]):
            request = json.loads(sys.stdin.read())
            result = pull(request) if args == ["pull"] else pull_s3(request)
        else:
            print("usage: python -m tfcluster.collect pull|s3 < REQUEST.json | verify DIR", file=sys.stderr)
            return 2
    except (CollectError, ManifestError, OSError, KeyError, ValueError) as error:
        print(json.dumps({"failed": True, "msg": str(error)}))
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
