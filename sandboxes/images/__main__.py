"""``python -m envhub.sandboxes.images build NAME``: build without the envhub CLI."""

import sys

from envhub.sandboxes.images import _main

sys.exit(_main(sys.argv[1:]))
