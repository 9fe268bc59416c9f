# Runs a peer proxy script (SGLang's mini_lb.py, vLLM's toy_proxy_server.py) as its own
# __main__, with the stand-ins of this folder behind the installed packages, so that a real
# orjson or sglang wins where one is installed.
import os
import runpy
import sys

script = sys.argv[1]
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
sys.argv = sys.argv[1:]

# FastAPI before 0.93 (Debian's) takes `lifespan=` without a word and never runs it; vLLM's toy
# proxy opens its worker clients there. Hand it to the router, which runs it (Starlette >= 0.26).
try:
    import fastapi

    _init = fastapi.FastAPI.__init__

    def _init_with_lifespan(self, *args, lifespan=None, **kwargs):
        _init(self, *args, **kwargs)
        if lifespan is not None:
            self.router.lifespan_context = lifespan

    if tuple(int(p) for p in fastapi.__version__.split(".")[:2]) < (0, 93):
        fastapi.FastAPI.__init__ = _init_with_lifespan
except ImportError:
    pass

runpy.run_path(script, run_name="__main__")
