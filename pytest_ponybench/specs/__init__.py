"""What a user writes, validated: task and arm specs, fault strings, option values, and
where the shipped library lives.

`spec` turns YAML into dataclasses, `plugin_arm` makes an arm of a plugin folder, `library`
finds the shipped tasks/arms/fixtures and combines a project's own with them, `faults` and
`argtypes` check the written form of a rehearsal's fault and of a command-line value.
May import `processes` only (and nothing of it today).
"""

# Harness files in a workspace and a run directory: never seeded, never counted. Here, not in
# spec.py, so the run directory's names (store/rundir.py) need no YAML: an inert session
# checks every folder for a kept run (plugin.pytest_ignore_collect) and must stay light.
HARNESS_PREFIX = "_ponybench"
