"""Checks that follow the ticket (issue 19): named checks, differential checks against the good
reference, the environment as an input, entry points as a user runs them, `review:` lines,
the mutation score, and how a `-m selftest` session shows them.

Every check here runs exactly as a cell's does: in the fork server's child, in a workspace.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from hypothesis import strategies as st

from pytest_ponybench.cell import lifecycle as cell, workspace
from pytest_ponybench.instruments import mutation
from pytest_ponybench.scoring import checklib, checks, inputs
from pytest_ponybench.specs.spec import SpecError, load_task

SPLIT_TASK = {
    "prompt": "Write words(text) in words.py: the words of a sentence a user typed, in order.",
    "file": "words.py",
    "seed": {"words.py": "def words(text):\n    raise NotImplementedError\n"},
    "checks": {
        "correct": textwrap.dedent('''\
            words = find_function(load(FILE), "words")

            @check
            def plain_sentence():
                assert words("a b") == ["a", "b"], f"words('a b') gave {words('a b')!r}"

            @check
            def agrees_with_the_reference():
                reference = find_function(load_reference(), "words")
                differential(words, reference, inputs.text(max_size=12), what="words")
            '''),
    },
    "review": [
        {"requirement": "splits on any run of white space, unicode spaces included",
         "check": "correct.agrees_with_the_reference"},
        {"requirement": "a plain sentence", "check": ["correct.plain_sentence"]},
    ],
    "refs": {"axis": "correct", "good": "def words(text):\n    return text.split()\n",
             "bad": "def words(text):\n    return text.split(' ')\n"},
}


# Checks one plain sentence only: the reference's maxsplit argument can change unnoticed.
WEAK_TASK = dict(SPLIT_TASK, checks={"correct": 'w = find_function(load(FILE), "words")\n'
                                                '@check\ndef plain_sentence():\n    assert w("a b") == ["a", "b"]\n'},
                 review=[{"requirement": "a plain sentence", "check": "correct.plain_sentence"}],
                 refs={"axis": "correct", "good": "def words(text):\n    return text.split(maxsplit=-1)\n",
                       "bad": "def words(text):\n    return []\n"})


def write_task(tmp_path: Path, task: dict, name: str = "split") -> Path:
    path = tmp_path / "tasks" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(task, sort_keys=False))
    return path


def judge(tmp_path: Path, task: dict, code: str) -> dict[str, checks.Verdict]:
    spec = load_task(write_task(tmp_path, task), tmp_path)
    ws = tmp_path / "ws"
    workspace.seed(spec, ws, files={spec.file: code})
    return cell.judge(spec, ws)


# --- named checks and differential checks --------------------------------------------------------

def test_the_good_reference_passes_its_differential_check(tmp_path):
    verdicts = judge(tmp_path, SPLIT_TASK, SPLIT_TASK["refs"]["good"])
    assert verdicts["correct"].ok, verdicts["correct"].reason


def test_a_disagreement_is_shrunk_and_names_its_check(tmp_path):
    verdict = judge(tmp_path, SPLIT_TASK, "def words(text):\n    return text.split(' ')\n")["correct"]
    assert not verdict.ok
    assert verdict.check == "agrees_with_the_reference"
    # Shrunk to the plainest input on which the two differ: the empty sentence.
    assert verdict.reason == ("words(''): the reference returns [], "
                              "the delivered code returns ['']"), verdict.reason


def test_the_same_code_always_gets_the_same_verdict(tmp_path):
    # A flaw only some inputs reach (a tab is not split): derandomized, found every time alike.
    code = "def words(text):\n    return [w for w in text.replace('\\n', ' ').split(' ') if w]\n"
    reasons = {judge(tmp_path / str(i), SPLIT_TASK, code)["correct"].reason for i in range(3)}
    assert len(reasons) == 1 and "the delivered code returns" in reasons.pop()


def test_the_first_failing_named_check_fails_the_axis(tmp_path):
    verdict = judge(tmp_path, SPLIT_TASK, "def words(text):\n    return []\n")["correct"]
    assert not verdict.ok and verdict.check == "plain_sentence"
    assert "words('a b') gave []" in verdict.reason


def test_a_type_that_differs_is_a_disagreement_and_both_refusing_agree(tmp_path):
    code = textwrap.dedent('''\
        from decimal import Decimal
        def exact(x):
            if x < 0:
                raise ValueError("negative")
            return Decimal(x)
        def floaty(x):
            if x < 0:
                raise ValueError("negative")
            return float(x)
        def refuses_differently(x):
            if x < 0:
                raise KeyError(x)  # refusing is refusing, whatever the exception
            return Decimal(x)
        ''')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "impl.py").write_text(code)
    check = textwrap.dedent('''\
        m = load(FILE)
        assert differential(m.refuses_differently, m.exact, st.integers(-5, 5), examples=30) >= 1
        try:
            differential(m.floaty, m.exact, st.integers(-5, 5), examples=30)
        except AssertionError as exc:
            assert "the reference returns Decimal('0'), the delivered code returns 0.0" in str(exc), str(exc)
        else:
            raise AssertionError("a float for a Decimal was taken as the same value")
        ''')
    verdict = checks.run_check(check, ws, "correct", "impl.py", 30)
    assert verdict.ok, verdict.reason


def test_a_check_that_calls_both_sides_wrongly_is_a_check_error_not_agreement(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "impl.py").write_text("def handle(method, path):\n    return 200\n")
    # One drawn request passed as one argument: both sides raise TypeError on every input.
    check = "m = load(FILE)\ndifferential(m.handle, m.handle, st.tuples(st.just('GET'), st.text()), examples=20)\n"
    verdict = checks.run_check(check, ws, "correct", "impl.py", 30)
    assert not verdict.ok and verdict.reason.startswith("check error: the reference refused every generated input"), verdict.reason
    fixed = "m = load(FILE)\ndifferential(m.handle, m.handle, st.just('GET'), st.text(), examples=20)\n"
    assert checks.run_check(fixed, ws, "correct", "impl.py", 30).ok


def test_a_check_without_a_reference_says_so(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "impl.py").write_text("x = 1\n")
    verdict = checks.run_check("load_reference()\n", ws, "correct", "impl.py", 10)
    assert not verdict.ok and "no good reference to compare with" in verdict.reason


def test_the_reference_copy_is_the_check_s_own(tmp_path):
    # Delivered code that rewrites the reference's files cannot make the reference agree with it.
    task = dict(SPLIT_TASK, checks={"correct": textwrap.dedent('''\
        import pathlib
        from pytest_ponybench import checklib
        for path in pathlib.Path(checklib.REFERENCE).rglob("words.py"):
            path.write_text("def words(text):\\n    return []\\n")
        @check
        def agrees():
            differential(find_function(load(FILE), "words"), find_function(load_reference(), "words"),
                         inputs.text(max_size=5), examples=20)
        ''')}, review=[])
    spec = load_task(write_task(tmp_path, task), tmp_path)
    reference = cell.reference_workspace(spec)
    assert (reference / "words.py").read_text() == SPLIT_TASK["refs"]["good"]
    ws = tmp_path / "ws"
    workspace.seed(spec, ws, files={"words.py": "def words(text):\n    return []\n"})
    cell.judge(spec, ws)
    assert (reference / "words.py").read_text() == SPLIT_TASK["refs"]["good"], "a check changed the shared reference"


# --- the environment as an input --------------------------------------------------------------------

@pytest.mark.parametrize("name", inputs.NAMES)
def test_an_input_class_is_built_once_and_draws_what_a_fresh_one_draws(name):
    """A composite calls `inputs.X()` once per draw: the strategy is shared (not validated
    again each time), and what it draws is exactly what one built anew draws."""
    shared, build = getattr(inputs, name), getattr(inputs, name).__wrapped__
    assert shared() is shared(), f"inputs.{name}() builds a new strategy on every call"

    def drawn(make):
        @st.composite
        def several(draw):
            return [draw(make()) for _ in range(draw(st.integers(0, 3)))]

        seen = []
        checklib.differential(lambda x: seen.append(x) or 1, lambda x: 1, several(), examples=25)
        return seen

    assert repr(drawn(shared)) == repr(drawn(build))


def test_fake_clock_moves_only_when_told_and_time_zone_changes_local_time(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "stamp.py").write_text(textwrap.dedent('''\
        import time
        from datetime import datetime
        def stamp():
            return time.time(), time.monotonic(), datetime.now().isoformat()
        def local_hour(ts):
            return time.localtime(ts).tm_hour
        '''))
    check = textwrap.dedent('''\
        with fake_clock(start=1_704_067_200.0) as clock:
            m = load(FILE)
            first = m.stamp()
            assert m.stamp() == first, "the fake clock moved by itself"
            clock.advance(90)
            later = m.stamp()
            assert later[0] - first[0] == 90 and later[1] - first[1] == 90, (first, later)
        with time_zone("Asia/Kathmandu"):  # UTC+5:45: midnight UTC is 05:45 there
            assert m.local_hour(1_704_067_200) == 5, m.local_hour(1_704_067_200)
        with time_zone("Pacific/Pago_Pago"):  # UTC-11
            assert m.local_hour(1_704_067_200) == 13
        before = Path.cwd()
        with elsewhere() as here:
            assert Path.cwd() == here != before and not str(here).isascii()
        assert Path.cwd() == before
        ''')
    verdict = checks.run_check(check, ws, "correct", "stamp.py", 30)
    assert verdict.ok, verdict.reason


# --- entry points as a user runs them ----------------------------------------------------------------

def test_find_class_takes_the_class_the_ticket_names(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "limiter.py").write_text(textwrap.dedent('''\
        class Bucket:
            def allow(self, request):
                return "helper"
        class RateLimiter:
            def allow(self, request):
                return "the one"
        '''))
    check = textwrap.dedent('''\
        m = load(FILE)
        assert find_class(m, "allow").__name__ == "Bucket"  # no name given: the first
        assert find_class(m, "allow", "RateLimiter").__name__ == "RateLimiter"
        try:
            find_class(m, "allow", "Limiter")
        except AssertionError:
            pass
        ''')
    verdict = checks.run_check(check, ws, "correct", "limiter.py", 10)
    assert verdict.ok, verdict.reason


def test_find_programs_knows_packages_shebang_scripts_and_servers_started_elsewhere(tmp_path):
    ws = tmp_path / "ws"
    (ws / "todo").mkdir(parents=True)
    (ws / "todo" / "__init__.py").write_text("")
    (ws / "todo" / "__main__.py").write_text("import sys\nprint('pkg', *sys.argv[1:])\n")
    (ws / "notes").write_text("#!/usr/bin/env python3\nimport sys\nprint('script', *sys.argv[1:])\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_todo.py").write_text("import sys\nprint(sys.argv)\n")
    check = textwrap.dedent('''\
        found = find_programs("python")
        names = [p.name for p in found]
        assert names == ["python -m todo", "notes"], names
        assert found[0].run("add", "x").stdout == "pkg add x\\n"
        assert found[1].run("ls").stdout == "script ls\\n"
        assert [p.name for p in find_programs("python", hint="notes")][0] == "notes"
        ''')
    verdict = checks.run_check(check, ws, "correct", None, 20)
    assert verdict.ok, verdict.reason

    node = tmp_path / "node"
    node.mkdir()
    (node / "app.js").write_text("const http = require('http');\n"
                                 "module.exports = http.createServer((q, s) => s.end('ok'));\n")
    (node / "index.js").write_text("const app = require('./app');\napp.listen(process.env.PORT || 3000);\n")
    check = textwrap.dedent('''\
        names = [p.name for p in find_programs("node")]
        assert names[0] == "node index.js", names
        ''')
    verdict = checks.run_check(check, node, "correct", None, 20)
    assert verdict.ok, verdict.reason
    # A server module in another folder, imported by path (ESM): the entry file still comes first.
    esm = tmp_path / "esm"
    (esm / "lib").mkdir(parents=True)
    (esm / "lib" / "server.mjs").write_text("import http from 'node:http';\n"
                                            "export default http.createServer((q, s) => s.end('ok'));\n")
    (esm / "main.mjs").write_text("import server from './lib/server.mjs';\nserver.listen(process.env.PORT);\n")
    check = check.replace("node index.js", "node main.mjs")  # sorted after lib/server.mjs
    verdict = checks.run_check(check, esm, "correct", None, 20)
    assert verdict.ok, verdict.reason


# --- review lines ---------------------------------------------------------------------------------

def test_review_lines_are_read_with_the_checks_they_name(tmp_path):
    spec = load_task(write_task(tmp_path, SPLIT_TASK), tmp_path)
    assert [(line.requirement, line.checks) for line in spec.review] == [
        ("splits on any run of white space, unicode spaces included", ("correct.agrees_with_the_reference",)),
        ("a plain sentence", ("correct.plain_sentence",))]


@pytest.mark.parametrize("line, message", [
    ({"requirement": "x", "check": "correct.no_such_check"},
     "field 'review[0]': 'correct.no_such_check' is not a named check"),
    ({"requirement": "x", "check": "safe.plain_sentence"}, "is not a named check"),
    ({"requirement": "", "check": "correct.plain_sentence"}, "must be a mapping with 'requirement'"),
    ({"requirement": "x", "checks": "correct.plain_sentence"}, "unknown key 'checks'"),
    ("just a sentence", "must be a mapping with 'requirement'"),
])
def test_a_review_line_that_names_no_real_check_is_refused(tmp_path, line, message):
    path = write_task(tmp_path, dict(SPLIT_TASK, review=[line]))
    with pytest.raises(SpecError) as excinfo:
        load_task(path, tmp_path)
    assert str(path) in str(excinfo.value) and message in str(excinfo.value)


# --- mutation score -----------------------------------------------------------------------------

def test_python_mutants_cover_each_operator_on_the_added_lines_only():
    seed = "def f(a, b):\n    raise NotImplementedError\n"
    good = "def f(a, b):\n    if a < b and not a:\n        return max(a, b) + 1\n    return 0\n"
    found = mutation.python_mutants("f.py", good, mutation.changed_lines(seed, good))
    kinds = {m.id.split(" ", 1)[1].split(":")[0] for m in found}
    assert {"comparison", "logic", "negation", "arithmetic", "constant", "call removed", "arguments swapped",
            "branch always true", "branch always false", "statement removed"} <= kinds, kinds
    assert all(m.id.startswith("f.py:") and int(m.id.split(":")[1]) >= 2 for m in found)
    assert all(m.source != good for m in found) and len({m.source for m in found}) == len(found)
    for m in found:
        compile(m.source, "f.py", "exec")


def test_javascript_mutants_skip_strings_and_comments():
    source = "// a < b\nconst s = 'x < y';\nif (a < b && ok === true) { n = n + 1; }\n"
    found = mutation.javascript_mutants("a.js", source)
    assert found and all(m.id.startswith("a.js:3:") for m in found), [m.id for m in found]


def test_the_mutation_score_counts_killed_survived_and_listed(tmp_path):
    spec = load_task(write_task(tmp_path, SPLIT_TASK), tmp_path)
    result = mutation.score(spec, workers=2)
    assert not result.problem and result.measured == len(mutation.mutants(spec)) >= 1
    assert result.killed, "no mutant of text.split() was killed"
    # List a killed mutant as equivalent, and one that does not exist: both are named problems.
    killed = result.killed[0]
    listed = dict(SPLIT_TASK, equivalent_mutants={killed: "claimed equivalent", "words.py:9:9 gone": "stale"})
    spec = load_task(write_task(tmp_path, listed), tmp_path)
    again = mutation.score(spec, workers=2)
    problems = mutation.problems(again)
    assert any("listed as equivalent but the checks kill it" in p and killed in p for p in problems), problems
    assert any("no such mutant any more: words.py:9:9 gone" in p for p in problems), problems


def test_a_weak_check_leaves_survivors_the_score_names(tmp_path):
    weak = WEAK_TASK
    spec = load_task(write_task(tmp_path, weak), tmp_path)
    result = mutation.score(spec, workers=2)
    assert result.survived and result.ratio is not None and result.ratio < mutation.TARGET
    assert any(p.startswith("survivor (kill it, or list it under equivalent_mutants") for p in mutation.problems(result))


# --- the selftest session ----------------------------------------------------------------------------

def _project(root: Path, task: dict) -> None:
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tasks"]\n')
    (root / "tasks").mkdir(exist_ok=True)
    (root / "tasks" / "split.yaml").write_text(yaml.safe_dump(task, sort_keys=False))


def test_a_selftest_session_shows_review_lines_and_the_mutation_score(pytester):
    _project(pytester.path, SPLIT_TASK)
    result = pytester.runpytest("-m", "selftest or ponybench_quality", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)  # good, bad, review, mutants and the two harness proofs
    result.stdout.fnmatch_lines(["*check strength*", "task*caught*accepted*review*mutants killed*",
                                 "split *-*-*2/2*/* (*%)*"])


def test_an_uncovered_review_line_fails_the_selftest(pytester):
    task = dict(SPLIT_TASK, review=[*SPLIT_TASK["review"], {"requirement": "keeps the order of the words"}])
    _project(pytester.path, task)
    result = pytester.runpytest("-m", "ponybench_quality", "-p", "no:cacheprovider", "-k", "review")
    result.assert_outcomes(failed=1, deselected=5)
    result.stdout.fnmatch_lines(["*1 review line(s) name no check: 'keeps the order of the words'*"])


def test_a_task_under_the_mutation_target_fails_the_selftest_naming_the_survivor(pytester):
    _project(pytester.path, WEAK_TASK)
    result = pytester.runpytest("-m", "ponybench_quality", "-p", "no:cacheprovider", "-k", "mutants")
    result.assert_outcomes(failed=1, deselected=5)
    result.stdout.fnmatch_lines(["*mutation score */* (*%)*", "*survivor (kill it, or list it under equivalent_mutants*"])
