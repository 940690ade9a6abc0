"""Put on a job's PYTHONPATH by `headroom watch --torch`: loads headroom's PyTorch hook
(_headroom_torch), then the job's own sitecustomize, if there is one later on sys.path, exactly
as Python would have loaded it without headroom. Nothing here may change what the job does: any
failure of headroom's part is written as a note for headroom and otherwise ignored."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _headroom_hook():
    try:
        import _headroom_torch

        _headroom_torch.install()
    except Exception as e:  # never the job's problem
        try:
            folder = os.environ.get("HEADROOM_TORCH_DIR")
            if folder:
                with open(os.path.join(folder, "pid%d.notes" % os.getpid()), "a") as f:
                    f.write("the bootstrap could not start: %r\n" % (e,))
        except Exception:
            pass


def _users_sitecustomize():
    import importlib.machinery
    import importlib.util

    for entry in sys.path:
        where = os.path.abspath(entry or os.getcwd())
        if where == _HERE:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [where])
        if spec is None or spec.loader is None:
            continue
        if os.path.dirname(os.path.abspath(spec.origin or "")) == _HERE:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        # Errors propagate as they would from the user's own sitecustomize (site prints them).
        spec.loader.exec_module(module)
        return


_headroom_hook()
_users_sitecustomize()
