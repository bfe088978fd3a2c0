"""The check API's public name: task files' checks import `pytest_ponybench.checklib`.

The module lives in `pytest_ponybench/scoring/checklib.py`; this name is that same module object
(not a copy), so a value the harness sets there at run time reads the same from here.
"""
import sys

from pytest_ponybench.scoring import checklib as _module

sys.modules[__name__] = _module
