"""What the tests of the commands that check flags before torch loads share."""

from __future__ import annotations

import subprocess
import sys


def refused_before_torch(module: str, argv: list[str]) -> tuple[bool, str]:
    """(whether torch was imported, stderr) after `module`'s main refused `argv`, in a fresh
    process: a flag is checked before the seconds torch's import costs."""
    code = (f"import sys\nfrom {module} import main\ntry:\n    main({argv!r})\n"
            "except SystemExit:\n    print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return result.stdout.strip() != "False", result.stderr
