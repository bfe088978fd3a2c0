"""The judge: what no check can decide, scored by a model against a published rubric
(`judge`), the judged graders of imported plugin evals (`judged_graders`), and a judge's
calibration on record (`calibration`). It runs the CLI through `cell.agent`; it may import
`instruments`, `cell` and everything below them.
"""
