"""Task and arm specs (spec.py), model ids, plugin directories, and option types (options.py).

Every invalid spec is a SpecError naming the file, the field and the problem; a bad task file
fails only its own collection."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest
import yaml

from pytest_ponybench.instruments import gate as instruments
from pytest_ponybench.specs import spec
from pytest_ponybench.specs.spec import ArmSpec, SpecError
from support import ponyproject as pp

GOOD = {
    "prompt": "Write add(a, b) in add.py.",
    "file": "add.py",
    "checks": {"correct": "assert load(FILE).add(1, 2) == 3, 'add is wrong'\n"},
    "refs": {"axis": "correct", "good": "def add(a, b):\n    return a + b\n",
             "bad": "def add(a, b):\n    return a - b\n"},
}


def task_file(tmp_path: Path, content: dict | str, name: str = "t1") -> Path:
    path = tmp_path / "tasks" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


def load(tmp_path: Path, content: dict | str, name: str = "t1") -> spec.TaskSpec:
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir(exist_ok=True)
    return spec.load_task(task_file(tmp_path, content, name), fixtures)


def error_of(tmp_path: Path, content: dict | str) -> str:
    with pytest.raises(SpecError) as info:
        load(tmp_path, content)
    message = str(info.value)
    assert message.startswith(str(tmp_path / "tasks" / "t1.yaml") + ": "), "the message names the file"
    return message


# --- valid specs -------------------------------------------------------------------------------

def test_a_valid_task_loads_every_field(tmp_path):
    (tmp_path / "fixtures" / "repo").mkdir(parents=True)
    task = load(tmp_path, {**GOOD, "description": "adds", "tags": ["mathy", "python"], "check_timeout": 5,
                           "seed": {"add.py": "def add(a, b):\n    raise NotImplementedError\n",
                                    "lib/helper.py": "X = 1\n"}})
    assert task.name == "t1" and task.prompt == GOOD["prompt"] and task.file == "add.py"
    assert task.seed == {"add.py": "def add(a, b):\n    raise NotImplementedError\n", "lib/helper.py": "X = 1\n"}
    assert task.refs == spec.Refs(good={"add.py": GOOD["refs"]["good"]}, bad={"add.py": GOOD["refs"]["bad"]},
                                  axis="correct")
    assert task.tags == ("mathy", "python") and task.check_timeout == 5.0
    assert task.kind == "surgical" and task.gated
    assert len(task.spec_hash) == 12


def test_the_spec_hash_changes_with_the_spec(tmp_path):
    first = load(tmp_path, GOOD).spec_hash
    assert load(tmp_path, {**GOOD, "prompt": "Write add(a, b), please."}).spec_hash != first
    assert load(tmp_path, GOOD).spec_hash == first


def test_task_kinds(tmp_path):
    (tmp_path / "fixtures" / "repo").mkdir(parents=True)
    assert load(tmp_path, {"prompt": "explain", "open": True}).kind == "open"
    fixture_task = load(tmp_path, {"prompt": "fix the bug", "fixture": "repo"})
    assert fixture_task.kind == "fixture" and fixture_task.fixture == (tmp_path / "fixtures" / "repo").resolve()


def test_a_fixture_through_an_environment_variable(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere" / "big-repo"
    outside.mkdir(parents=True)
    monkeypatch.setenv("PONY_TEST_REPO", str(outside))
    assert load(tmp_path, {"prompt": "p", "fixture": "$PONY_TEST_REPO"}).fixture == outside.resolve()
    assert load(tmp_path, {"prompt": "p", "fixture": "${PONY_TEST_REPO}"}).fixture == outside.resolve()


# --- invalid specs: file, field, problem --------------------------------------------------------

def test_malformed_yaml_gives_the_line(tmp_path):
    message = error_of(tmp_path, "prompt: fine\nfile: a.py\nbad: a: b\n")
    assert "malformed YAML at line 3" in message and "mapping values are not allowed" in message


def test_a_top_level_list_is_not_a_spec(tmp_path):
    assert "expected a mapping" in error_of(tmp_path, "- prompt: x\n")


def test_an_unknown_field_is_named(tmp_path):
    message = error_of(tmp_path, {**GOOD, "promt": "typo"})
    assert "field 'promt': unknown field" in message and "prompt" in message.split("known fields are")[1]


def test_a_missing_prompt(tmp_path):
    message = error_of(tmp_path, {"open": True, "description": "no prompt"})
    assert "field 'prompt': missing" in message


def test_an_empty_prompt(tmp_path):
    assert "field 'prompt': must be a non-empty string" in error_of(tmp_path, {"prompt": "  ", "open": True})


@pytest.mark.parametrize("where", ["seed", "refs.good"])
def test_an_absolute_seed_path(tmp_path, where):
    bad = {"/etc/passwd": "x"}
    content = ({**GOOD, "seed": bad} if where == "seed"
               else {**GOOD, "refs": {**GOOD["refs"], "good": bad}})
    message = error_of(tmp_path, content)
    assert f"field '{where}'" in message and "'/etc/passwd' is absolute" in message


@pytest.mark.parametrize("rel", ["../outside.py", "lib/../../outside.py", "..\\outside.py"])
def test_a_seed_path_climbing_out(tmp_path, rel):
    message = error_of(tmp_path, {**GOOD, "seed": {rel: "x"}})
    assert "field 'seed'" in message and "climbs out of the workspace with '..'" in message


@pytest.mark.parametrize("rel", [".", "./"])
def test_a_seed_path_naming_the_workspace_itself(tmp_path, rel):
    # Before: accepted, then writing the seed crashed the gate with IsADirectoryError.
    message = error_of(tmp_path, {**GOOD, "seed": {rel: "x"}})
    assert "field 'seed'" in message and "names the workspace itself" in message


def test_an_entry_file_climbing_out(tmp_path):
    assert "field 'file'" in error_of(tmp_path, {**GOOD, "file": "../add.py"})


def test_a_seed_path_with_the_harness_prefix(tmp_path):
    message = error_of(tmp_path, {**GOOD, "seed": {"_ponybench.result.json": "{}"}})
    assert "field 'seed'" in message and "harness prefix" in message


def test_a_fixture_that_does_not_exist(tmp_path):
    message = error_of(tmp_path, {"prompt": "p", "fixture": "nothere"})
    assert "field 'fixture'" in message and str(tmp_path / "fixtures" / "nothere") in message
    assert "does not exist" in message


def test_a_fixture_variable_that_is_not_set(tmp_path, monkeypatch):
    monkeypatch.delenv("PONY_TEST_UNSET_REPO", raising=False)
    message = error_of(tmp_path, {"prompt": "p", "fixture": "$PONY_TEST_UNSET_REPO"})
    assert "field 'fixture'" in message and "PONY_TEST_UNSET_REPO is not set" in message


def test_a_check_with_a_syntax_error(tmp_path):
    checks = {"correct": "x = 1\nif x = 2:\n    pass\n"}
    message = error_of(tmp_path, {**GOOD, "checks": checks})
    assert "field 'checks.correct'" in message and "syntax error at line 2" in message


def test_a_check_on_an_unknown_axis(tmp_path):
    assert "field 'checks.speed'" in error_of(tmp_path, {**GOOD, "checks": {**GOOD["checks"], "speed": "pass"}})


def test_a_robust_check_loads_beside_correct_and_is_named_in_review(tmp_path):
    robust = ("@check\ndef huge_numbers():\n    assert load(FILE).add(1e308, 1e308) == float('inf')\n")
    task = load(tmp_path, {**GOOD, "checks": {**GOOD["checks"], "robust": robust},
                           "review": [{"requirement": "adds the far edges of floats", "check": "robust.huge_numbers"}]})
    assert task.checks["robust"] == robust and task.review[0].checks == ("robust.huge_numbers",)
    assert spec.AXES == ("correct", "safe", "robust") and spec.PASS_AXES == ("correct", "safe")


def test_the_check_prelude_comes_before_each_axis(tmp_path):
    prelude = "def added(a, b):\n    return load(FILE).add(a, b)\n"
    checks = {"correct": "assert added(1, 2) == 3, 'add is wrong'\n", "robust": "assert added(1e308, 1e308) > 0\n"}
    task = load(tmp_path, {**GOOD, "check_prelude": prelude, "checks": checks})
    assert set(task.checks) == set(checks)
    for axis, code in checks.items():
        assert task.checks[axis].startswith(prelude) and task.checks[axis].endswith(code)
        compile(task.checks[axis], axis, "exec")


@pytest.mark.parametrize("prelude, message", [
    ("def f(:\n    pass\n", "syntax error at line 1"),
    ("x = 1\n@check\ndef f():\n    pass\n", "move each @check function under checks.<axis>"),
    (42, "must be Python code as a string"),
])
def test_a_bad_check_prelude_is_named(tmp_path, prelude, message):
    error = error_of(tmp_path, {**GOOD, "check_prelude": prelude})
    assert "field 'check_prelude'" in error and message in error, error


def test_a_bad_reference_is_never_caught_on_robust_alone(tmp_path):
    content = {**GOOD, "checks": {**GOOD["checks"], "robust": "pass\n"}, "refs": {**GOOD["refs"], "axis": "robust"}}
    message = error_of(tmp_path, content)
    assert "field 'refs.axis'" in message and "use correct or safe" in message


def test_checks_without_refs(tmp_path):
    content = {k: v for k, v in GOOD.items() if k != "refs"}
    message = error_of(tmp_path, content)
    assert "field 'refs'" in message and "good and a bad reference" in message


def test_refs_axis_without_a_check(tmp_path):
    content = {**GOOD, "refs": {**GOOD["refs"], "axis": "safe"}}
    message = error_of(tmp_path, content)
    assert "field 'refs.axis'" in message and "'safe' has no check" in message


def test_refs_axis_that_is_no_axis(tmp_path):
    assert "field 'refs.axis'" in error_of(tmp_path, {**GOOD, "refs": {**GOOD["refs"], "axis": "speed"}})


def test_a_ref_missing_its_bad_side(tmp_path):
    refs = {"axis": "correct", "good": GOOD["refs"]["good"]}
    assert "field 'refs.bad': missing" in error_of(tmp_path, {**GOOD, "refs": refs})


def test_a_plain_string_ref_needs_the_entry_file(tmp_path):
    content = {k: v for k, v in GOOD.items() if k != "file"}
    assert "field 'refs.good'" in error_of(tmp_path, content)


def test_a_surgical_task_without_checks(tmp_path):
    assert "field 'checks'" in error_of(tmp_path, {"prompt": "do something"})


@pytest.mark.parametrize("field, value", [("tags", "mathy"), ("tags", ["not an identifier"]),
                                          ("check_timeout", 0), ("check_timeout", True), ("open", "yes")])
def test_badly_typed_fields(tmp_path, field, value):
    assert f"field '{field}'" in error_of(tmp_path, {**GOOD, field: value})


def test_a_task_file_name_that_cannot_be_a_cell_id(tmp_path):
    with pytest.raises(SpecError, match="must be letters, digits"):
        load(tmp_path, GOOD, name="two__parts")


# --- arms ----------------------------------------------------------------------------------------

def arm_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "arms" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_arms_load_with_their_kinds(tmp_path):
    arm_file(tmp_path, "baseline", "# adds nothing\ndescription: as it comes\n")
    arm_file(tmp_path, "empty", "")
    arm_file(tmp_path, "yagni", "prompt: Follow YAGNI principles.\n")
    arm_file(tmp_path, "small-diff", "plugin: small-diff\nproof: [Keep the diff small]\n")
    arms = spec.load_arms(tmp_path / "arms")
    assert sorted(arms) == ["baseline", "empty", "small-diff", "yagni"]
    assert [arms[n].kind for n in sorted(arms)] == ["baseline", "baseline", "plugin", "prompt"]
    assert arms["yagni"].prompt == "Follow YAGNI principles."
    assert arms["small-diff"].proof == ("Keep the diff small",)


def test_an_arm_with_an_unknown_field(tmp_path):
    path = arm_file(tmp_path, "bad", "promt: typo\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: field 'promt': unknown field"):
        spec.load_arm(path)


# --- models ------------------------------------------------------------------------------------------

def test_model_aliases_resolve_to_full_ids():
    ids = spec.model_ids([])
    assert spec.resolve_model("haiku", ids) == "claude-haiku-4-5-20251001"
    assert spec.resolve_model("sonnet", ids) == "claude-sonnet-4-6"
    assert spec.resolve_model("opus", ids) == "claude-opus-4-8"


def test_model_ids_overridden_by_configuration():
    ids = spec.model_ids(["haiku = claude-haiku-9-test", "", "fast=claude-fast-1"])
    assert spec.resolve_model("haiku", ids) == "claude-haiku-9-test"
    assert spec.resolve_model("fast", ids) == "claude-fast-1"
    assert spec.resolve_model("sonnet", ids) == "claude-sonnet-4-6"  # the others keep their defaults


def test_a_full_model_id_passes_through():
    assert spec.resolve_model("claude-something-5-20990101", spec.model_ids([])) == "claude-something-5-20990101"


def test_an_unknown_model_alias_is_rejected():
    with pytest.raises(SpecError, match="--models: unknown model 'gpt4'; use one of haiku, opus, sonnet"):
        spec.resolve_model("gpt4", spec.model_ids([]))


def test_a_malformed_model_id_line_is_rejected():
    with pytest.raises(SpecError, match="ponybench_model_ids: 'haiku claude-x' must read 'alias = full-model-id'"):
        spec.model_ids(["haiku claude-x"])


# --- plugin directories --------------------------------------------------------------------------------

PLUGIN_ARM = ArmSpec(name="small", path=None, plugin="small-diff")


def make_dirs(*paths: Path) -> None:
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)


def test_plugin_dir_env_override_wins(tmp_path):
    override, cache = tmp_path / "mine", tmp_path / "cache"
    make_dirs(override, cache / "mkt" / "small-diff" / "1.0.0", tmp_path / "arms" / "small-diff")
    found = spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path / "arms", cache, {"SMALL_DIFF_PLUGIN_DIR": str(override)})
    assert found == str(override.resolve())


def test_plugin_dir_env_override_that_is_not_a_directory(tmp_path):
    with pytest.raises(SpecError, match="SMALL_DIFF_PLUGIN_DIR=.*is not a directory"):
        spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path, tmp_path / "cache",
                                {"SMALL_DIFF_PLUGIN_DIR": str(tmp_path / "nope")})


def test_plugin_dir_newest_installed_version(tmp_path):
    cache = tmp_path / "cache"
    make_dirs(cache / "mkt" / "small-diff" / "1.9.0", cache / "mkt" / "small-diff" / "1.10.0",
              cache / "mkt" / "small-diff" / "1.2.3", cache / "other-mkt" / "small-diff" / "0.9.0",
              cache / "mkt" / "other-plugin" / "9.9.9", tmp_path / "arms" / "small-diff")
    found = spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path / "arms", cache, {})
    assert found == str((cache / "mkt" / "small-diff" / "1.10.0").resolve())


def test_plugin_dir_under_the_real_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    version = tmp_path / ".claude" / "plugins" / "cache" / "small-diff" / "small-diff" / "2.0.1"
    make_dirs(version)
    monkeypatch.delenv("SMALL_DIFF_PLUGIN_DIR", raising=False)
    assert spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path / "arms") == str(version.resolve())


def test_plugin_dir_relative_to_arms(tmp_path):
    arms = tmp_path / "arms"
    make_dirs(arms / "plugins" / "small-diff")
    arm = ArmSpec(name="small", path=None, plugin="plugins/small-diff")
    assert spec.resolve_plugin_dir(arm, arms, tmp_path / "empty-cache", {}) == str((arms / "plugins/small-diff").resolve())


def test_a_missing_plugin_says_what_to_do(tmp_path):
    with pytest.raises(SpecError) as info:
        spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path / "arms", tmp_path / "cache", {})
    message = str(info.value)
    assert "arm 'small': plugin 'small-diff' not found" in message
    assert "set SMALL_DIFF_PLUGIN_DIR" in message and str(tmp_path / "cache") in message
    assert str(tmp_path / "arms") in message


def test_an_arm_without_a_plugin_has_no_plugin_dir(tmp_path):
    assert spec.resolve_plugin_dir(ArmSpec(name="b", path=None), tmp_path, tmp_path, {}) is None


# --- collection: a bad task file fails alone --------------------------------------------------------------

@pytest.fixture
def keep_sigterm(monkeypatch):
    """An in-process benchmark run turns SIGTERM into an interrupt; give the handler back.
    The gate's tree-kill proof (two interpreter starts, tested in test_proof_cache.py) is a no-op here."""
    monkeypatch.setattr(instruments, "prove_tree_kill", lambda: None)
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


BROKEN = {"prompt": "p", "open": True, "seed": {"../escape.py": "x"}}


def test_a_bad_task_fails_only_its_own_collection(pytester, keep_sigterm):
    pp.write_project(pytester.path, {"add": pp.ADD_TASK, "broken": BROKEN}, {"baseline": "{}\n"})
    result = pytester.runpytest("--co", "-q", "-m", "selftest", *pp.QUIET)
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "tasks/add.yaml::selftest-good" in out and "tasks/add.yaml::selftest-bad" in out
    result.stdout.fnmatch_lines(["*broken.yaml: field 'seed': '../escape.py' climbs out of the workspace*"])
    assert "Traceback" not in out  # a plain sentence, not a traceback


def test_a_bad_task_stops_a_benchmark_before_any_cell(pytester, monkeypatch, keep_sigterm):
    pp.write_project(pytester.path, {"add": pp.ADD_TASK, "broken": BROKEN}, {"baseline": "{}\n"})
    for key, value in pp.fake_env(pytester.path, write=pp.GOOD_WRITES).items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest(*pp.bench_args(pytester.path))
    # Stopped on the controller before collection: with or without xdist, no cell starts.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid task files; no cell was started:*", "*broken.yaml*",
                                 "*--continue-on-collection-errors*"])
    assert pp.calls(pytester.path) == []


def test_continue_on_collection_errors_runs_the_other_tasks(pytester, monkeypatch, keep_sigterm):
    pp.write_project(pytester.path, {"add": pp.ADD_TASK, "broken": BROKEN}, {"baseline": "{}\n", "b2": "{}\n"})
    for key, value in pp.fake_env(pytester.path, write=pp.GOOD_WRITES).items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest(*pp.bench_args(pytester.path, "--continue-on-collection-errors"))
    result.assert_outcomes(passed=2, errors=1, deselected=5)
    assert sorted(Path(c["cwd"]).name for c in pp.calls(pytester.path)) == ["add__b2__haiku__0",
                                                                          "add__baseline__haiku__0"]


# --- option types: rejected at parse time ------------------------------------------------------------------

@pytest.mark.parametrize("args, option", [
    (["--runs", "0"], "--runs"), (["--runs", "two"], "--runs"), (["--runs=-1"], "--runs"),
    (["--models", ""], "--models"), (["--models", "haiku,bad name"], "--models"), (["--models", "a__b"], "--models"),
    (["--arms", ",,"], "--arms"), (["--arms", "baseline,yagni,baseline"], "--arms"),
    (["--models", "haiku,haiku"], "--models"),
    (["--ponybench-timeout", "0"], "--ponybench-timeout"), (["--ponybench-timeout=-5"], "--ponybench-timeout"),
    (["--ponybench-timeout", "soon"], "--ponybench-timeout"), (["--ponybench-timeout", "nan"], "--ponybench-timeout"),
    (["--ponybench-timeout", "inf"], "--ponybench-timeout"), (["--ponybench-timeout", "1e12"], "--ponybench-timeout"),
    (["--ponybench-max-cost", "inf"], "--ponybench-max-cost"), (["--ponybench-max-cost", "0"], "--ponybench-max-cost"),
])
def test_bad_option_values_are_usage_errors(pytester, args, option):
    result = pytester.runpytest("--co", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"argument {option}" in result.stderr.str()


@pytest.mark.parametrize("key, value", [("ponybench_runs", "0"), ("ponybench_timeout", "-1"),
                                        ("ponybench_models", "bad name")])
def test_bad_ini_values_are_usage_errors(pytester, key, value):
    pp.write_project(pytester.path, {}, {}, ini={key: value})
    result = pytester.runpytest("--ponybench", "--co")  # read when a session asks for the plugin
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ini option {key} = '{value}'" in result.stderr.str()


def test_an_unknown_model_is_a_usage_error(pytester):
    pp.write_project(pytester.path, {"add": pp.ADD_TASK}, {"baseline": "{}\n"})
    result = pytester.runpytest("--ponybench", "--models", "haiku,gpt4", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--models: unknown model 'gpt4'" in result.stderr.str()


def test_an_unknown_arm_is_a_usage_error(pytester):
    pp.write_project(pytester.path, {"add": pp.ADD_TASK}, {"baseline": "{}\n"})
    result = pytester.runpytest("--ponybench", "--arms", "baseline,nosuch", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--arms: unknown arm 'nosuch'" in result.stderr.str()


@pytest.mark.parametrize("flag", ["--ponybench-plugin", "--ponybench-claude"])
def test_a_path_given_with_a_space_means_what_it_means_with_equals(pytester, tmp_path_factory, flag):
    # pytest picks its rootdir and ini before plugin options exist, from the arguments that
    # look like paths: the space form moved the rootdir to the common parent and dropped the
    # project's pytest.ini (its tasks, its models), silently changing which cells run.
    pp.write_project(pytester.path, {"add": pp.ADD_TASK}, {"baseline": "{}\n"}, ini={"ponybench_models": "sonnet"})
    plug = tmp_path_factory.mktemp("plug")  # outside the project, as ../plug
    (plug / ".claude-plugin").mkdir()
    (plug / ".claude-plugin" / "plugin.json").write_text('{"name": "plug"}')
    (plug / "skills" / "terse").mkdir(parents=True)
    (plug / "skills" / "terse" / "SKILL.md").write_text("---\nname: terse\ndescription: short\n---\nBe terse.\n")
    value = str(plug if flag == "--ponybench-plugin" else pp.FAKE)
    spaced = pytester.runpytest_subprocess("--ponybench", "--co", "-q", flag, value, *pp.QUIET)
    equals = pytester.runpytest_subprocess("--ponybench", "--co", "-q", f"{flag}={value}", *pp.QUIET)
    assert spaced.ret == equals.ret == 0, spaced.stdout.str()[-2000:] + spaced.stderr.str()[-2000:]
    cells = sorted(line for line in spaced.stdout.lines if "::" in line)
    assert cells == sorted(line for line in equals.stdout.lines if "::" in line)
    expected = ["tasks/add.yaml::add__baseline__sonnet__0"]
    if flag == "--ponybench-plugin":
        expected.append("tasks/add.yaml::add__plug__sonnet__0")
    assert cells == expected


def test_plugin_versions_rank_as_releases_then_by_age(tmp_path):
    cache = tmp_path / "cache"
    for version in ("1.9.0", "1.10.0", "1.10.0b1", "0f3c9a2"):
        (cache / "mkt" / "small-diff" / version).mkdir(parents=True)
    found = spec.resolve_plugin_dir(PLUGIN_ARM, tmp_path / "arms", cache, {})
    assert Path(found).name == "1.10.0"  # not "1.9.0" (string order), nor the hash folder


def test_a_spec_text_is_parsed_once_per_process_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    from pytest_ponybench.specs import spec

    parses = []
    real = spec.YAML_LOADER

    def counting(text):
        parses.append(text)
        return real(text)

    monkeypatch.setattr(spec, "YAML_LOADER", counting)
    monkeypatch.setattr(spec, "_parsed", {})
    text = "description: once\nlist: [1, 2]\n"
    first = spec.load_yaml(text, tmp_path / "a.yaml")
    first["list"].append(3)  # a caller that changes what it got changes nobody else's
    second = spec.load_yaml(text, tmp_path / "b.yaml")
    assert second == {"description": "once", "list": [1, 2]}
    second["list"].append(4)
    assert spec.load_yaml(text, tmp_path / "c.yaml") == {"description": "once", "list": [1, 2]}
    assert len(parses) == 1
    spec.load_yaml(text + "more: 1\n", tmp_path / "a.yaml")  # an edited file is parsed again
    assert len(parses) == 2


# --- judge_completeness -----------------------------------------------------------------------

def test_a_task_asks_for_the_completeness_judgement_and_a_bad_value_is_refused(tmp_path):
    from pytest_ponybench.judge import judge

    plain = load(tmp_path, GOOD)
    assert plain.judge_completeness is None and judge.task_axes(plain) == ("over_engineering",)
    asked = load(tmp_path, {**GOOD, "judge_completeness": True}, "t2")
    assert judge.task_axes(asked) == judge.AXES
    assert {p.axis for p in judge.pairs_for(asked)} == set(judge.AXES)  # complete vs stub too
    open_off = load(tmp_path, {"prompt": "Write it.", "open": True, "judge_completeness": False}, "t3")
    assert judge.task_axes(open_off) == ("over_engineering",)
    assert asked.spec_hash != plain.spec_hash
    message = error_of(tmp_path, {**GOOD, "judge_completeness": "yes"})
    assert "t1.yaml: field 'judge_completeness': must be true or false" in message


def test_checks_in_process_is_one_line_of_why(tmp_path):
    assert load(tmp_path, GOOD).checks_in_process == ""  # behind the trust boundary by default
    task = load(tmp_path, {**GOOD, "checks_in_process": " its check imports the agent's package by name "})
    assert task.checks_in_process == "its check imports the agent's package by name"
    assert "checks_in_process" in error_of(tmp_path, {**GOOD, "checks_in_process": True})
