"""The run's records: the run directory (one owner for every file a run keeps) and the
cell record (its fields, and which cells count). May import `specs` and `processes`.
"""
