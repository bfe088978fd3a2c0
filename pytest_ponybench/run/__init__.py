"""The pytest side: options, collection, the session's state, the controller (the gate
and the gathering), cells at once in one process (`pool`), progress, workers on other hosts
(`fleet`), rounds until decided, judging in a run, imported plugin evals, and the
ponybench-calibrate console script. The top layer below `plugin.py`: it may import every
other subpackage.
"""
