"""The judged graders of `claude plugin eval` suites (judged_graders.py): what each needs,
strict verdicts, 2 of 3 votes, the proof on pass and fail examples, and the scripted judge.
The end-to-end run through the real CLI is in test_plugin_evals.py."""
from __future__ import annotations

import json
import threading

import pytest
import yaml

from pytest_ponybench.judge import judge, judged_graders as jg
from pytest_ponybench.rehearsal import scripted_judge
from pytest_ponybench.run import plugin_evals
from pytest_ponybench.specs.spec import SpecError


def verdict(passed, why="one line"):
    return json.dumps({"pass": passed, "why": why})


def asker(*texts, status="finished", cost=0.01):
    """A fake judge answering `texts` in the order it is asked."""
    calls, lock = [], threading.Lock()

    def ask(prompt_text):
        with lock:
            calls.append(prompt_text)
            text = texts[min(len(calls), len(texts)) - 1]
        return judge.Reply(status, text, cost, "" if status == "finished" else "API failed (529)")
    ask.calls = calls
    return ask


GRADER = jg.JudgedGrader("tone", "llm", rubric="The answer is polite.", pass_example=jg.Work("Done, thanks."))
WORK = jg.Work("I wrote it.", (("note.txt", "hello\n"),))


@pytest.mark.parametrize("text, passed", [(verdict(True), True), ("```json\n" + verdict(False) + "\n```", False)])
def test_a_well_formed_verdict(text, passed):
    assert jg.parse_verdict(text)[0] is passed


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("Yes, it passes.", "not one JSON object"),
    (json.dumps({"pass": "yes", "why": "w"}), "true or false"),
    (json.dumps({"pass": 1, "why": "w"}), "true or false"),
    (json.dumps({"pass": True}), "exactly the keys"),
    (json.dumps({"pass": True, "why": "w", "score": 3}), "exactly the keys"),
    (verdict(True, "two\nlines"), "one line"),
])
def test_a_malformed_verdict_is_no_vote(text, words):
    passed, _, problem = jg.parse_verdict(text)
    assert passed is None and words in problem


def test_two_of_three_votes_decide():
    one = jg.judge_grader(asker(verdict(True), verdict(False), verdict(True)), GRADER, "ticket", WORK)
    assert one.passed is True and sorted(one.votes, key=str) == [False, True, True]
    assert one.line().startswith("tone (llm): pass 2/3: ")
    two = jg.judge_grader(asker(verdict(False), verdict(False), verdict(True)), GRADER, "ticket", WORK)
    assert two.passed is False and two.line().startswith("tone (llm): fail 1/3")
    assert two.cost_usd == pytest.approx(0.03) and two.requests == 3


def test_malformed_answers_are_asked_again_then_not_judged_never_a_pass_or_fail():
    ask = asker("prose", "prose", "prose", "prose", "prose", verdict(True))
    one = jg.judge_grader(ask, GRADER, "ticket", WORK)
    assert one.requests == 6  # each of 3 votes asked twice
    assert one.passed is None and one.status.startswith("not judged: 1 valid vote(s), 2 must agree")
    assert "not one JSON object" in one.status and one.line() == f"tone (llm): {one.status}"
    fields = jg.record_fields([one], [], "fp")
    assert fields["judged_graders_passed"] is None and fields["graders_judge_status"].startswith("not judged")


def test_an_api_failure_is_an_infra_error_of_the_verdict():
    one = jg.judge_grader(asker(verdict(True), status="api_error"), GRADER, "ticket", WORK)
    assert one.passed is None and one.status.startswith("infra_error: API failed (529)")


def test_the_request_holds_the_ticket_rubric_reference_and_work():
    baseline = jg.JudgedGrader("like-ref", "baseline", reference="[final answer] reference text")
    text = jg.prompt(baseline, "Write a note.", WORK)
    assert text.startswith("GRADER: baseline\n")
    for part in ("Write a note.", "reference text", "I wrote it.", "### note.txt", "hello"):
        assert part in text
    assert text.index("reference text") < text.index("## The agent's work")
    assert "The answer is polite." in jg.prompt(GRADER, "t", WORK)


def test_the_proof_needs_a_pass_of_the_pass_example_and_a_fail_of_the_fail_example():
    def sees_refusal(text):
        return judge.Reply("finished", verdict(jg.REFUSAL not in text.split("## The agent's work")[1]), 0.01)
    assert jg.prove(sees_refusal, GRADER, "ticket", "case")[0] is None
    problem, cost, requests = jg.prove(asker(verdict(False)), GRADER, "ticket", "case")
    assert problem == ("case (grader tone (llm), pass example vs fail example): the judge said fail of the pass "
                       "example and fail of the fail example; it must pass the first and fail the second")
    assert requests == 2 and cost == pytest.approx(0.02)


@pytest.mark.parametrize("script, work, passed", [
    ("agree", jg.Work("I wrote it."), True), ("agree", jg.Work(jg.REFUSAL), False),
    ("agree", jg.Work(""), False), ("disagree", jg.Work("I wrote it."), False),
])
def test_the_scripted_judge_answers_grader_requests(script, work, passed):
    text = scripted_judge.scripted_answer(jg.prompt(GRADER, "ticket", work), script)
    assert jg.parse_verdict(text)[0] is passed
    assert jg.parse_verdict(scripted_judge.scripted_answer(jg.prompt(GRADER, "t", work), "malformed"))[0] is None


def test_a_kept_verdict_round_trips_and_its_key_follows_the_rubric():
    one = jg.judge_grader(asker(verdict(True)), GRADER, "ticket", WORK)
    again = jg.verdict_from(json.loads(json.dumps(jg.verdict_data(one))))
    assert again.line() == one.line() and again.key == GRADER.key
    other = jg.JudgedGrader("tone", "llm", rubric="The answer is rude.")
    assert other.key != GRADER.key
    assert jg.fingerprint("m", "1") != jg.fingerprint("m2", "1") != jg.fingerprint("m", "2")


def case_with(tmp_path, graders: dict, case: dict | None = None, reference: str | None = None):
    folder = tmp_path / "evals" / "c"
    (folder / "graders").mkdir(parents=True)
    (folder / "prompt.md").write_text("Write a note.\n")
    (folder / "case.yaml").write_text(yaml.safe_dump({"graders": [{"type": "file_exists", "path": "*.txt"}],
                                                      **(case or {})}))
    for name, text in graders.items():
        (folder / "graders" / f"{name}.md").write_text(text)
    if reference is not None:
        (folder / "ref.jsonl").write_text(reference)
    (found,) = plugin_evals.load_suite(tmp_path, "p")
    return {g.name: g for g in found.judged}


def test_what_each_judged_grader_needs_is_read_at_import(tmp_path):
    ref = json.dumps({"type": "result", "result": "Wrote note.txt."}) + "\n"
    graders = case_with(tmp_path, {
        "body": "---\ntype: llm\n---\nThe note is friendly.\n",
        "field": "---\ntype: llm\nrubric: Says what it did.\n---\n",
        "none": "---\ntype: llm\n---\n",
        "ref": "---\ntype: baseline\nreference: ref.jsonl\n---\n",
        "no-ref": "---\ntype: baseline\n---\n",
        "outside": "---\ntype: baseline\nreference: ../../../etc/passwd\n---\n",
    }, {"ponybench": {"rehearsal": {"files": {"n.txt": "x\n"}, "answer": "Wrote n.txt."}}}, reference=ref)
    assert graders["body"].rubric == "The note is friendly." and not graders["body"].problem
    assert graders["field"].rubric == "Says what it did."
    assert "has no rubric: give it a `rubric` field" in graders["none"].problem
    assert graders["ref"].reference == "[final answer] Wrote note.txt." and not graders["ref"].problem
    # The case's rehearsal block is the pass example of its graders.
    assert graders["ref"].pass_example == graders["body"].pass_example == jg.Work("Wrote n.txt.", (("n.txt", "x\n"),))
    assert "names no reference transcript" in graders["no-ref"].problem
    assert "is not a file in" in graders["outside"].problem


def test_an_llm_grader_of_a_plain_plugin_eval_case_runs_proven_on_its_fail_example_alone(tmp_path):
    graders = case_with(tmp_path, {"g": "---\ntype: llm\n---\nFriendly.\n",
                                   "r": "---\ntype: baseline\nreference: ref.jsonl\n---\n"}, reference="plain text\n")
    # No ponybench block: the grader runs (issue 35 item 3); nothing made up stands for a pass.
    assert graders["g"].problem == "" and graders["g"].pass_example is None
    ask = asker(verdict(False))
    assert jg.prove(ask, graders["g"], "ticket", "case") == (None, pytest.approx(0.01), 1)
    assert jg.REFUSAL in ask.calls[0]  # the one request: an agent that did nothing, which must fail
    problem, _, _ = jg.prove(asker(verdict(True)), graders["g"], "ticket", "case")
    assert problem == ("case (grader g (llm), fail example): the judge said pass of the fail example (an agent "
                       "that did nothing); it must fail it")
    # A baseline grader's reference is its own pass example: as good as the reference.
    assert graders["r"].pass_example == jg.Work("plain text\n") and not graders["r"].problem


def test_a_judge_pair_is_the_proof_s_examples_and_a_bad_one_is_refused(tmp_path):
    pair = {"pass": {"answer": "Wrote it.", "files": {"note.txt": "hi\n"}}, "fail": {"answer": "Nope."}}
    (g,) = case_with(tmp_path, {"g": "---\ntype: llm\n---\nFriendly.\n"}, {"ponybench": {"judge_pair": pair}}).values()
    assert g.pass_example == jg.Work("Wrote it.", (("note.txt", "hi\n"),)) and g.fail_example == jg.Work("Nope.")
    with pytest.raises(SpecError, match=r"case.yaml: field 'ponybench.judge_pair.pass': must be"):
        case_with(tmp_path / "b", {"g": "---\ntype: llm\n---\nF.\n"}, {"ponybench": {"judge_pair": {"pass": "text"}}})


def test_the_docs_show_the_grader_frames_as_sent():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "judge.md").read_text(encoding="utf-8")
    for text in jg.FRAMES.values():
        assert text in doc


def test_a_cell_s_work_is_its_answer_and_the_files_it_wrote_not_the_seed_or_harness(tmp_path):
    from types import SimpleNamespace

    from pytest_ponybench.cell import workspace
    from pytest_ponybench.store.rundir import write_record

    ws = tmp_path / "cell"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref\n")
    (ws / "seeded.txt").write_text("as seeded\n")
    (ws / "changed.txt").write_text("changed\n")
    (ws / "notes").mkdir()
    (ws / "notes" / "new.md").write_text("# new\n")
    (ws / "_ponybench.transcript.jsonl").write_text("{}\n")
    write_record(ws, workspace.SEED_MANIFEST, {"seeded.txt": workspace.digest("as seeded\n"), "changed.txt": workspace.digest("x\n")}, None)
    task = SimpleNamespace(seed={"seeded.txt": "as seeded\n", "changed.txt": "x\n"})
    work = jg.cell_work(task, ws, None, "Done.")
    assert work.answer == "Done." and work.files == (("changed.txt", "changed\n"), ("notes/new.md", "# new\n"))


def test_a_cell_s_work_names_links_special_and_binary_files_and_reads_a_bounded_part(tmp_path):
    import tracemalloc
    from types import SimpleNamespace

    from support.hostile_files import assert_named_not_shown, plant_hostile_files

    ws = tmp_path / "cell"
    ws.mkdir()
    planted = plant_hostile_files(ws, tmp_path / "outside")
    (ws / "notes.md").write_text("# notes\n")
    tracemalloc.start()
    try:
        work = jg.cell_work(SimpleNamespace(seed={}), ws, None, "Done.")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = jg.prompt(jg.JudgedGrader("g", "llm", "a rubric"), "the ticket", work)
    assert_named_not_shown(text, planted)
    assert "### notes.md\n```\n# notes" in text
    assert peak < 16 * judge.MAX_READ_BYTES, peak
