"""Rehearsal: the real CLI against a scripted stand-in for the Messages API on
127.0.0.1 (`server`), the pytest plugin that points each cell's CLI at it and proves the arm
(`plugin`), and the scripted judge (`scripted_judge`). May import `judge`, `instruments`,
`cell` and everything below them; never `reports` or `run`.
"""
