"""`python -m tools.lab ...`"""

from tools.lab.cli import main

raise SystemExit(main())
