"""The graders' check code's public name: the checks generated for imported plugin evals import `pytest_ponybench.graders`.

The module lives in `pytest_ponybench/scoring/graders.py`; this name is that same module object
(not a copy), so a value the harness sets there at run time reads the same from here.
"""
import sys

from pytest_ponybench.scoring import graders as _module

sys.modules[__name__] = _module
