"""Scoring what the agent left behind: the checks (untrusted code in a child process),
the check API task files use (`checklib`, with its batteries, inputs and regressions), the trust
boundary between a check and the agent's code (`remote`: the protocol both sides speak; `host`:
what the agent's side does; `check_boundary`, `check_state`, `check_clock`: the check's side),
the graders of imported plugin evals, lines of code (`metrics`), and the keys of what a
verdict depends on (`fingerprint`). May import `store`, `specs` and `processes`.
"""
