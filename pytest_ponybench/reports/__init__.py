"""Reports of a run: statistics (`stats`, `sequential`), one table builder (`tables`)
and its renderings (`summary`, `markdown`, `html_report`, `plots`, `report`), the judged columns
(`judge_report`), and the two console scripts that read kept runs (`compare` with its judged
gates, `history`). May import `judge`, `instruments`, `cell` and everything below them;
never `rehearsal` or `run`.
"""
