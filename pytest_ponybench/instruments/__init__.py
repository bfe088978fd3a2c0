"""Proving the instruments before spending: the gate's good and bad references
(`gate`), the mutation score (`mutation`) and check strength against plausible wrong
implementations (`strength`). They run references through a cell's scoring, so they sit above
`cell`; they may import it and everything below it.
"""
