"""Write tfcluster_probe-1.0-py3-none-any.whl into the directory given (a real wheel, made without any index) and,
when a second path is given, a hash-pinned requirements file for it (the runtime installs with --require-hashes)."""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

FILES = {
    "tfcluster_probe/__init__.py": 'VERSION = "1.0"\n',
    "tfcluster_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tfcluster-probe\nVersion: 1.0\n",
    "tfcluster_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tfcluster\nRoot-Is-Purelib: true\n"
                                           "Tag: py3-none-any\n",
}


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main() -> int:
    out = Path(sys.argv[1]) / "tfcluster_probe-1.0-py3-none-any.whl"
    record = [record_line(name, text.encode()) for name, text in FILES.items()]
    record.append("tfcluster_probe-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(out, "w") as wheel:
        for name, text in FILES.items():
            wheel.writestr(name, text)
        wheel.writestr("tfcluster_probe-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    if len(sys.argv) > 2:
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        Path(sys.argv[2]).write_text(f"tfcluster-probe==1.0 \\\n    --hash=sha256:{digest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
