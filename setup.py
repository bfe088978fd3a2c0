"""Build hook only: every piece of metadata lives in pyproject.toml.

The wheel carries the shipped library (tasks/, arms/ with arms/plugins/, fixtures/) as package
data under pytest_ponybench/library/, so an installed plugin runs it from any directory
(pytest_ponybench/specs/library.py). The repository keeps them at its root; they are copied here,
at build time, leaving out what is never part of the library (caches, runs, node_modules).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

LIBRARY = ("tasks", "arms", "fixtures")
NEVER = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", "node_modules", "runs", ".git", ".venv",
         "venv", "*.egg-info", ".DS_Store")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        here = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "pytest_ponybench" / "library"
        for name in LIBRARY:
            source = here / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; build from a checkout or an sdist of pytest-ponybench")
            if (target / name).exists():
                shutil.rmtree(target / name)
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns(*NEVER))


setup(cmdclass={"build_py": BuildWithLibrary})
