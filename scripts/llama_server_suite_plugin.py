"""pytest plugin for llama.cpp's server test suite run by scripts/llama_server_suite.sh
(loaded with `-p llama_server_suite_plugin`): the suite's session fixture starts every
model preset once, with downloads allowed, to fill its download cache; here the models
are local files mapped by scripts/llama_server_compat.py, so there is nothing to fetch and
that warm-up is skipped (a preset with no local model fails only the tests that use it)."""
import os
import sys


def pytest_configure(config):
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    import utils  # the suite's utils.py (the suite's folder is the working directory)

    utils.ServerPreset.load_all = staticmethod(lambda: None)
