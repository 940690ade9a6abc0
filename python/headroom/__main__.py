"""`python -m headroom ARGS…` runs the headroom program with ARGS."""

import os
import sys

from ._binary import binary

if __name__ == "__main__":
    path = binary()
    os.execv(path, [path] + sys.argv[1:])
