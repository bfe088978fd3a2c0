"""What a user writes, validated: task and arm specs, fault strings, option values, and
where the shipped library lives.

`spec` turns YAML into dataclasses, `plugin_arm` makes an arm of a plugin folder, `library`
finds the shipped tasks/arms/fixtures and combines a project's own with them, `faults` and
`argtypes` check the written form of a rehearsal's fault and of a command-line value.
May import `processes` only (and nothing of it today).
"""
