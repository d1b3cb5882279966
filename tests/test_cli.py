"""`tune` as a person runs it: real subprocesses, real exit codes, real output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import ROOT, TUNE, run_tune, runs_file, toy_workdir
from tunepilot.memory.text import format_params

TOY = """
import os
import time
from pathlib import Path
from typing import Any

def quadratic(config, report):
    return (config["x"] - 2.0) ** 2

def lr_epochs(config, report):  # the parameters `tune init` writes for a trainer of one's own
    loss = 1.0
    for epoch in range(1, config["epochs"] + 1):
        loss = abs(config["lr"] - 1e-3) + config["dropout"] + 1.0 / epoch
        report(epoch, loss)
    return loss

def sleepy(config, report):  # slow while the file "slow" is there
    if os.path.exists("slow"):
        time.sleep(30)
    return 1.0
"""


@pytest.fixture
def workdir(tmp_path):
    return toy_workdir(tmp_path, TOY)


def assert_refused(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    err = proc.stderr.strip()
    assert err.startswith("error: ")
    assert len(err.splitlines()) == 1, f"expected one paragraph, got:\n{err}"
    for fragment in fragments:
        assert fragment in err


def test_help_is_fast_and_imports_no_framework():
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from tunepilot.ui.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'jax', 'lightning', 'optuna', 'flax', 'optax',"
        " 'langchain_core', 'openai') if m in sys.modules)\n"
        "print('HEAVY', heavy, round(time.perf_counter() - t, 3))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert "HEAVY [] " in out, out


def test_bad_search_space_is_refused(workdir):
    (workdir / "bad.toml").write_text('[space]\nx = { type = "float", low = 1.0, high = 0.5 }\n')
    proc = run_tune("run", "--llm", "none", "--config", "bad.toml", "--trainer", "toy:quadratic",
                    cwd=workdir)
    assert_refused(proc, "'x'", "low (1) must be below high (0.5)", "swap them")


def test_unknown_trainer_is_refused(workdir):
    proc = run_tune("run", "--llm", "none", "--trainer", "lightnign", cwd=workdir)
    assert_refused(proc, "Unknown trainer 'lightnign'", "Did you mean 'lightning'?")
    proc = run_tune("run", "--llm", "none", "--trainer", "toy:quadratik", "--config", "toy.toml",
                    cwd=workdir)
    assert_refused(proc, "no function 'quadratik'", "Did you mean 'quadratic'?")


def test_unknown_strategy_is_refused(workdir):
    proc = run_tune("run", "--llm", "none", "--strategy", "genetic", cwd=workdir)
    assert_refused(proc, "strategy", "'optuna', 'review', 'llm' or 'hybrid'", "'genetic'")
    proc = run_tune("run", "--llm", "none", "--strategy", "llm", "--llm", "none", cwd=workdir)
    assert_refused(proc, "Strategy 'llm' needs an LLM", "--llm openai:MODEL")


def test_missing_config_file_is_refused(workdir):
    proc = run_tune("run", "--llm", "none", "--config", "nope.toml", cwd=workdir)
    assert_refused(proc, "nope.toml does not exist")


def test_config_with_unknown_key_is_refused(workdir):
    (workdir / "typo.toml").write_text("n_trails = 5\n")
    proc = run_tune("run", "--llm", "none", "--config", "typo.toml", cwd=workdir)
    assert_refused(proc, "unknown setting 'n_trails'", "Did you mean 'n_trials'?")


def test_unknown_flag_is_a_usage_error(workdir):
    proc = run_tune("run", "--llm", "none", "--n-trail", "3", cwd=workdir)
    assert proc.returncode == 2
    assert "No such option" in proc.stderr


def test_run_resume_show_best(workdir):
    args = ("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:quadratic",
            "--storage",
            "sqlite:///s.db")
    first = run_tune(*args, "--n-trials", "6", cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert "budget of 6 trials used" in first.stdout
    # After the first trial, once: how long the rest may take at its pace.
    assert first.stdout.count("pace: trial 0 took ") == 1
    assert "the 5 trials left would take about " in first.stdout
    assert "to resume: tune run" in first.stdout and "--n-trials 12" in first.stdout

    second = run_tune(*args, "--n-trials", "10", cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert "resuming: 6 trials done" in second.stdout
    assert "10 finished in study toy-quadratic (4 new)" in second.stdout

    study = optuna.load_study(study_name="toy-quadratic",
                              storage="sqlite:///" + str(workdir / "s.db"))
    assert [t.number for t in study.trials] == list(range(10))

    show = run_tune("show", "--storage", "sqlite:///s.db", cwd=workdir)
    assert show.returncode == 0, show.stderr
    assert "optuna" in show.stdout and "10 trials" in show.stdout

    best = run_tune("best", "--storage", "sqlite:///s.db", "--study", "toy-quadratic",
                    cwd=workdir)
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout) == {"epochs": 3, "seed": 0, "x": study.best_params["x"]}

    # What the study's LLM would read for its next trial, as it would read it.
    prompt = run_tune("prompt", "--storage", "sqlite:///s.db", cwd=workdir)
    assert prompt.returncode == 0, prompt.stderr
    assert prompt.stdout.startswith("# system\nYou are tunepilot")
    assert ("Trial #10 (past the budget of 10 trials: it runs when the search is resumed with "
            "a larger one)") in prompt.stdout
    assert "Train the user's model 'toy:quadratic'" in prompt.stdout
    assert f"#{study.best_trial.number} [" in prompt.stdout  # the best trial is shown


def test_show_names_the_studies_when_the_name_is_wrong(workdir):
    run_tune("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:quadratic",
             "--storage",
             "sqlite:///s.db", "--n-trials", "2", cwd=workdir)
    proc = run_tune("show", "--storage", "sqlite:///s.db", "--study", "toy-quadratc",
                    cwd=workdir)
    assert_refused(proc, "No study named 'toy-quadratc'", "Did you mean 'toy-quadratic'?")


def test_ctrl_c_fails_the_running_trial_and_exits_130(workdir):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}"}
    (workdir / "slow").touch()
    proc = subprocess.Popen(
        [*TUNE, "run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:sleepy",
         "--storage",
         "sqlite:///s.db", "--n-trials", "3"],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    storage = "sqlite:///" + str(workdir / "s.db")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the trial is running
        time.sleep(0.3)
        try:
            if any(t.params for t in optuna.load_study(study_name="toy-sleepy",
                                                       storage=storage).trials):
                break  # mid-trial: the config is stored and the trainer runs
        except Exception:  # the database is still being created
            continue
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in out
    assert "1 finished in study toy-sleepy (1 new): 0 complete, 0 pruned, 1 failed" in out
    assert ("trial 0 was interrupted: marked failed; its config runs first when the search is "
            "resumed") in out
    assert "to resume: tune run" in out
    trials = optuna.load_study(study_name="toy-sleepy", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]
    # Resumed, the interrupted config runs first: what it was cut short of.
    (workdir / "slow").unlink()
    again = run_tune("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:sleepy",
                     "--storage", "sqlite:///s.db", "--n-trials", "3", cwd=workdir)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = optuna.load_study(study_name="toy-sleepy", storage=storage).trials
    # The retry takes the interrupted trial's place in the budget of 3.
    assert [t.state.name for t in trials] == ["FAIL"] + ["COMPLETE"] * 3, again.stdout
    assert trials[1].params == trials[0].params != trials[2].params
    assert "up to 3 trials (resuming: 1 trial done)" in again.stdout
    assert "trials: 4 finished in study toy-sleepy (3 new): 3 complete, 0 pruned, 1 failed" in (
        again.stdout)


def test_report_and_log_are_written_for_a_run(workdir):
    proc = run_tune("run", "--llm", "none", "--config", "toy.toml", "--trainer", "toy:quadratic",
                    "--storage", "sqlite:///s.db", "--n-trials", "5", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    report = runs_file(workdir, "sqlite:///s.db", "toy-quadratic", ".html")
    html = report.read_text()
    assert "Stopped:</b> budget of 5 trials used" in html
    # History, loss against the training seconds, and the configs' parallel plot (one
    # parameter: no importance); each trial's seconds in the table.
    assert "Optimization history" in html and html.count("data:image/png;base64,") == 3
    assert "Loss against training seconds" in html and "<th>seconds</th>" in html
    assert "Configs of the completed trials" in html
    assert "No LLM was used." in html
    log = runs_file(workdir, "sqlite:///s.db", "toy-quadratic", ".log").read_text()
    assert log.count("[optuna]") == 5 and "run ends: budget of 5 trials used" in log
    again = run_tune("report", "--storage", "sqlite:///s.db", "-o", "r.html", cwd=workdir)
    assert again.returncode == 0 and (workdir / "r.html").read_text().startswith("<!doctype")


def test_tune_init_writes_a_starter_file_that_runs(tmp_path):
    done = run_tune("init", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "tune.toml").read_text()
    for name in ("lr", "batch_size", "precision", "dropout", "n_trials", "timeout", "storage"):
        assert f"{name} = " in text, name
    assert_refused(run_tune("init", cwd=tmp_path), "tune.toml exists", "--output")
    run = run_tune("run", "--config", "tune.toml", "--llm", "none", "--data", "synthetic:2000",
                   "--n-trials", "1", cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "budget of 1 trials used" in run.stdout


def test_tune_init_for_user_code_and_a_run_with_no_space_points_to_it(workdir):
    bare = run_tune("run", "--llm", "none", "--trainer", "toy:quadratic", cwd=workdir)
    assert_refused(bare, "no parameters to tune", "tune init --trainer")
    done = run_tune("init", "--trainer", "toy:quadratic", "-o", "mine.toml", cwd=workdir)
    assert done.returncode == 0, done.stderr
    text = (workdir / "mine.toml").read_text()
    assert 'trainer = "toy:quadratic"' in text and "batch_size" in text


def test_tune_prompt_of_a_review_study_shows_the_candidate_the_next_trial_draws(workdir):
    """`tune prompt` on a `review` study prints the sampler's candidate as the run will draw it
    (an in-memory copy of the study; the study itself is only read), with the review's rules:
    no "notes" rule (its answers have none) and no "propose" line."""
    from tests.llm_server import ScriptedLLMServer

    accept = json.dumps({"decision": "accept", "rationale": "the sampler's draw is fine"})
    with ScriptedLLMServer(lambda request: accept) as server:
        args = ("run", "--llm", "openai:gpt-4o-mini", "--llm-base-url", server.base_url,
                "--strategy", "review", "--max-override-share", "1", "--opening", "0",
                "--config", "toy.toml",
                "--trainer", "toy:quadratic", "--storage", "sqlite:///s.db")
        env = {"OPENAI_API_KEY": "sk-test"}
        first = run_tune(*args, "--n-trials", "4", cwd=workdir, env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        storage = "sqlite:///" + str(workdir / "s.db")
        before = [t.params for t in optuna.load_study(study_name="toy-quadratic",
                                                      storage=storage).trials]
        prompt = run_tune("prompt", "--storage", "sqlite:///s.db", cwd=workdir, env=env)
        assert prompt.returncode == 0, prompt.stderr
        text = prompt.stdout
        assert "A new study created" not in text + prompt.stderr  # the copy is ours, not news
        trials = optuna.load_study(study_name="toy-quadratic", storage=storage).trials
        assert [t.params for t in trials] == before  # only read
        assert "## The optimizer's candidate for trial #4" in text
        assert 'Answer {"decision": "accept", "rationale": "..."}' in text
        assert "Propose the next configuration" not in text
        assert '"notes"' not in text
        shown = text.split("proposes: ", 1)[1].split("\n", 1)[0]

        second = run_tune(*args, "--n-trials", "5", cwd=workdir, env=env)
        assert second.returncode == 0, second.stdout + second.stderr
    trial = optuna.load_study(study_name="toy-quadratic", storage=storage).trials[4]
    assert trial.user_attrs["proposer"] == "optuna"  # accepted
    assert shown == format_params(trial.params), (shown, trial.params)


# The first week of a new user.

def test_a_flag_wins_over_the_file_tune_init_wrote(workdir):
    """`tune init` puts `epochs = 3` in [space]; `--epochs 1` trains 1 epoch, says where the
    value came from, and a later change of it is refused as the change it is."""
    assert run_tune("init", "--trainer", "toy:lr_epochs", cwd=workdir).returncode == 0
    done = run_tune("run", "--config", "tune.toml", "--epochs", "1", "--n-trials", "2",
                    "--llm", "none", "--no-isolate", cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "epochs = 1 (flag; the file says 3)" in done.stdout
    assert "epochs = 1 (fixed)" in done.stdout  # the search space as the run uses it
    assert "--epochs 1" in done.stdout  # the resume command
    trials = optuna.load_study(study_name="toy-lr_epochs",
                               storage="sqlite:///" + str(workdir / "tunepilot.db")).trials
    assert all(len(t.intermediate_values) == 1 for t in trials)
    changed = run_tune("run", "--config", "tune.toml", "--epochs", "2", "--n-trials", "3",
                       "--llm", "none", "--no-isolate", cwd=workdir)
    assert changed.returncode == 2 and "space.fixed.epochs: 1 -> 2" in changed.stderr


def test_show_and_best_read_the_newest_of_several_studies_and_say_which(workdir):
    for study in ("first", "second"):
        done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:quadratic", "--llm",
                        "none", "--n-trials", "2", "--study", study, cwd=workdir)
        assert done.returncode == 0, done.stderr
    show = run_tune("show", cwd=workdir)
    assert show.returncode == 0, show.stderr
    assert ("study second (the newest of 2 in sqlite:///tunepilot.db; the others: first; pick "
            "one with --study NAME)") in show.stderr
    assert "study second: " in show.stdout
    best = run_tune("best", cwd=workdir)
    assert best.returncode == 0 and "study second (the newest" in best.stderr
    assert "x" in json.loads(best.stdout)  # stdout stays the JSON alone
    named = run_tune("show", "--study", "first", cwd=workdir)
    assert named.returncode == 0 and "newest" not in named.stderr


def _second_study(workdir: Path, default: float, first_trials: int) -> tuple[Any, list[Any]]:
    """Study "one" of `first_trials` trials, then study "two" of 2 on the same task (it
    warm-starts from one): two's run and its trials."""
    (workdir / "toy.toml").write_text(
        f'[space]\nx = {{ type = "float", low = -10.0, high = 10.0, default = {default} }}\n')
    args = ("run", "--config", "toy.toml", "--trainer", "toy:quadratic", "--llm", "none")
    assert run_tune(*args, "--n-trials", str(first_trials), "--study", "one",
                    cwd=workdir).returncode == 0
    two = run_tune(*args, "--n-trials", "2", "--study", "two", cwd=workdir)
    assert two.returncode == 0, two.stderr
    trials = optuna.load_study(study_name="two",
                               storage="sqlite:///" + str(workdir / "tunepilot.db")).trials
    return two, trials


def test_a_new_study_says_where_its_warm_start_comes_from_after_its_own_default(workdir):
    # The default is the range's worst point (x = -10, loss 144), so study one's best is one
    # of its searched trials whatever the sampler draws, and study two queues it after its
    # own default.
    two, trials = _second_study(workdir, -10.0, 4)
    assert "warm start: from study one (the same trainer, data and parameters)" in two.stdout
    assert "runs as trial 1" in two.stdout
    assert "warm start: from study one" in (workdir / "tunepilot-runs" / "two.log").read_text()
    assert trials[0].params == {"x": -10.0}  # the space's default is trial 0, as docs/cli.md says
    assert trials[1].user_attrs.get("warm_start_from") == "one"


def test_a_clean_run_leaves_only_its_database_and_its_runs_folder(workdir):
    before = {p.name for p in workdir.iterdir()}
    done = run_tune("run", "--config", "toy.toml", "--trainer", "toy:quadratic", "--llm",
                    "none", "--n-trials", "2", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in workdir.iterdir()} - before - {"__pycache__"} == {
        "tunepilot.db", "tunepilot-runs"}


def test_a_typo_in_the_space_is_refused_naming_the_file_and_leaves_nothing_behind(workdir):
    (workdir / "typo.toml").write_text(
        '[space]\nlr = { type = "flaot", low = 1e-4, high = 1e-1 }\n')
    before = {p.name for p in workdir.iterdir()}
    refused = run_tune("run", "--config", "typo.toml", "--n-trials", "2", cwd=workdir)
    assert_refused(refused, "Invalid configuration in typo.toml", "has type 'flaot'",
                   "Did you mean 'float'?")
    assert {p.name for p in workdir.iterdir()} - before - {"__pycache__"} == set()


def test_damaged_storage_is_named_with_advice_that_fits_it(workdir):
    args = ("--config", "toy.toml", "--trainer", "toy:quadratic", "--llm", "none")
    assert run_tune("run", *args, "--n-trials", "3", "--storage", "journal:j.log",
                    cwd=workdir).returncode == 0
    whole = (workdir / "j.log").read_bytes()
    (workdir / "j.log").write_bytes(whole[:-25])  # the last record cut short
    show = run_tune("show", "--storage", "journal:j.log", cwd=workdir)
    assert_refused(show, "ends in a partial record", "truncate -s")
    assert (workdir / "j.log").read_bytes() == whole[:-25]  # nothing written there
    assert run_tune("run", *args, "--n-trials", "3", cwd=workdir).returncode == 0
    db = (workdir / "tunepilot.db").read_bytes()
    (workdir / "tunepilot.db").write_bytes(db[: len(db) // 3])
    show = run_tune("show", cwd=workdir)
    assert_refused(show, "The SQLite file tunepilot.db is damaged", "It was cut short: ",
                   "mv tunepilot.db tunepilot.db.damaged")
    assert "mysql" not in show.stderr.lower()


def test_small_things_a_new_user_tripped_on(workdir):
    assert run_tune("init", "--trainer", "toy:lr_epochs", "-o", "mine.toml",
                    cwd=workdir).returncode == 0
    text = (workdir / "mine.toml").read_text()
    assert text.startswith("# mine.toml: what `tune run --config mine.toml` searches")
    # Its commented [[start]] example, uncommented, is a config of its own space.
    (workdir / "mine.toml").write_text(text.replace("# [[start]]\n# lr = 3e-3\n# batch_size",
                                                    "[[start]]\nlr = 3e-3\nbatch_size"))
    done = run_tune("run", "--config", "mine.toml", "--n-trials", "2", "--llm", "none",
                    "--no-isolate", cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    null = run_tune("run", "--data", "criteo:/dev/null", "--llm", "none", cwd=workdir)
    assert_refused(null, "/dev/null is not a regular file")


def test_a_warm_start_that_is_the_default_runs_once(workdir):
    two, trials = _second_study(workdir, 2.0, 3)
    assert "its best, trial 0 (0), is already this study's trial 0" in two.stdout
    assert trials[0].params == {"x": 2.0} and trials[1].params != trials[0].params
