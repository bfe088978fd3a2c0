"""One cell, start to end (`lifecycle`): the workspace (`workspace`, `beside`), the
contract with the `claude` CLI (`agent`: calling it; `confine`: its sandbox;
`transcript`: what its output means), the arm proven from hook events (`proof`), then the
scoring. May import `scoring`, `store`, `specs` and `processes`.
"""
