"""Where the `headroom` program is: the one this package was installed with, else PATH.

Everything the package measures goes through that program, so Python and the command line
can never disagree about a number."""

import os
import shutil
import sys
import sysconfig

#: Set to a path to use another headroom program than the one found.
ENV = "HEADROOM_BIN"


def binary():
    """The path of the `headroom` program (HEADROOM_BIN, the wheel's own, then PATH)."""
    given = os.environ.get(ENV)
    if given:
        return given
    # The wheel installs the program into the environment's scripts folder.
    for scheme_dir in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        path = os.path.join(scheme_dir or "", "headroom")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("headroom")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the headroom program: install the wheel (pip install headroom-gpu), put "
        "headroom on PATH, or name it in HEADROOM_BIN"
    )
