"""``python -m testbed needs [list]``: every requirement of the tests, and whether it is here;
``python -m testbed needs plan [NAME...]``: the installs due (scripts/install-test-deps).
"""

from __future__ import annotations

import sys

from . import _needs

if __name__ == "__main__":
    if sys.argv[1:2] != ["needs"]:
        print("usage: python -m testbed needs [list | plan [NAME...]]", file=sys.stderr)
        sys.exit(2)
    sys.exit(_needs.main(sys.argv[2:] or ["list"]))
