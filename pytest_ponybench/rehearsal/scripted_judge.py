"""The rehearsal's judge: answers computed from a request's own text, never a measurement.

A rehearsal of a judged run (`--ponybench-judge-rehearse`) and the tests play the judge with
these, so the whole path (CLI, parsing, votes, proof, records) runs at zero spend. The judge
of the task axes (judge.py) and the judged graders of plugin evals (judged_graders.py) each
get their stand-in here; the scripted server (rehearsal.JudgeScript) serves them.
"""
from __future__ import annotations

import json
import re

from pytest_ponybench.judge.judged_graders import REFUSAL

REHEARSAL_SCRIPTS = ("agree", "disagree", "malformed")
# Constructs the scripted judge counts as over-building (it reads the submission's text).
_OVERBUILT_MARKERS = ("ABC", "abstractmethod", "Registry", "Factory", "HandlerBase")
_STUB_MARKERS = ("NotImplementedError", "TODO", "not implemented")


def scripted_answer(request_text: str, script: str) -> str:
    """The rehearsal's judge: an answer computed from the request's own text, so the whole
    path (CLI, parsing, votes, proof, records) runs at zero spend. `agree` scores by counting
    over-building constructs and stub markers in the submission (so it ranks the generated
    pairs rightly); `disagree` gives the opposite score; `malformed` answers prose. It is a
    stand-in for exercising the harness, never a measurement."""
    if script == "malformed":
        return "The submission looks reasonable to me overall."
    if re.search(r"^GRADER: (?:llm|baseline)$", request_text, re.M) and "AXIS: " not in request_text:
        return scripted_verdict(request_text, script)  # a claude plugin eval grader's request
    axis = "completeness" if "AXIS: completeness" in request_text else "over_engineering"
    submission = request_text.split("## The submission", 1)[-1]
    if axis == "over_engineering":
        found = [m for m in _OVERBUILT_MARKERS if m in submission]
        score = min(3, len(found))
        if script == "disagree":
            score = 3 - score
        cited = found[0] if score and found else ("a helper" if score else "")
        return json.dumps({"score": score, "construct": cited, "why": f"scripted: {len(found)} marker(s)"})
    stubs = sum(submission.count(m) for m in _STUB_MARKERS)
    score = max(0, 3 - min(3, stubs))
    if script == "disagree":
        score = 3 - score
    return json.dumps({"score": score, "missing": "" if score == 3 else "stubbed functions",
                       "why": f"scripted: {stubs} stub marker(s)"})

def scripted_verdict(request_text: str, script: str) -> str:
    """The scripted judge on a grader request: `agree` fails work that did nothing (the
    refusal, or no answer and no file) and passes anything else; `disagree` says the opposite.
    (`malformed` is handled by scripted_answer.) A stand-in for the harness, never a
    measurement."""
    work = request_text.split("## The agent's work", 1)[-1]
    did_nothing = REFUSAL in work or ("(no final answer)" in work and "(no file written)" in work)
    passed = not did_nothing
    if script == "disagree":
        passed = not passed
    return json.dumps({"pass": passed, "why": "scripted: " + ("did nothing" if did_nothing else "did the work")})
