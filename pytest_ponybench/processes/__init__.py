"""Processes that cannot outlive their cell: the harness's way to start a program.

`procs` is the API the rest of the package calls; `forkserver` and `supervisor` are what runs
in the fork server and in each supervisor it forks; `sandbox` is the sandbox a check call runs
in. The lowest layer: it imports nothing of the package.
"""
