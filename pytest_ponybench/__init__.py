"""pytest-ponybench: benchmark Claude Code arms by the code the agent writes."""

__version__ = "0.1.0"
