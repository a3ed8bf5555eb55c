"""Settings refused where they are given, each message naming the setting and the fix."""

from pathlib import Path

import pytest
from jsonargparse import Namespace

from stable_rl.cli import main
from stable_rl.cli.app import check_trainer_settings
from stable_rl.cli.components import check_components
from stable_rl.cli.config_syntax import syntax_error
from stable_rl.cli.resume import check_checkpoint_file
from stable_rl.data import ReasoningGymPrompts
from stable_rl.rl import RolloutDataModule
from stable_rl.rollout import HFEngine
from stable_rl.rollout.engine import Sampling

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ({"max_new_tokens": 0}, r"max_new_tokens=0: a response needs at least 1 token; set it in data.engine"),
        ({"top_p": 0.0}, r"temperature=1.0, top_p=0.0: need temperature >= 0 .* and 0 < top_p <= 1"),
        ({"temperature": -0.5}, r"temperature=-0.5, top_p=1.0: need temperature >= 0"),
    ],
)
def test_sampling_that_cannot_sample_is_refused(sampling, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**sampling)
    with pytest.raises(ValueError, match=message):  # the engine's settings build one
        HFEngine(**sampling)


@pytest.mark.parametrize("name", ["prompts_per_step", "max_prompt_tokens", "eval_samples", "eval_prompts_per_batch"])
def test_data_sizes_below_1_are_refused(name):
    with pytest.raises(ValueError, match=rf"data.init_args.{name}=0 must be at least 1"):
        RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=HFEngine(), **{name: 0})


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"mini_batch_size": 0}, r"mini_batch_size=0 must be at least 1, or null for the whole batch"),
        ({"micro_batch_size": -4}, r"micro_batch_size=-4 must be at least 1, or null for the whole batch"),
        ({"max_staleness": -1}, r"max_staleness=-1 must be at least 0: the steps a rollout waits"),
    ],
)
def test_batch_sizes_that_would_mean_something_else_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        RolloutDataModule(ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=HFEngine(), **setting)


def test_lightnings_automatic_optimization_settings_point_to_stable_rls():
    with pytest.raises(ValueError, match=r"trainer.gradient_clip_val=1.0: .* set model.init_args.max_grad_norm"):
        check_trainer_settings(Namespace(gradient_clip_val=1.0, accumulate_grad_batches=1))
    with pytest.raises(ValueError, match=r"trainer.accumulate_grad_batches=4: .* set data.init_args.micro_batch_size"):
        check_trainer_settings(Namespace(gradient_clip_val=None, accumulate_grad_batches=4))
    check_trainer_settings(Namespace(gradient_clip_val=None, accumulate_grad_batches=1))


def test_an_empty_or_missing_checkpoint_file_is_named(tmp_path):
    (tmp_path / "cut.ckpt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"cut.ckpt is empty \(a save cut off .*\): resume from another one"):
        check_checkpoint_file(str(tmp_path / "cut.ckpt"))
    with pytest.raises(FileNotFoundError, match=r"nope.ckpt not found: pass the path of a .ckpt file"):
        check_checkpoint_file(str(tmp_path / "nope.ckpt"))
    (tmp_path / "sharded").mkdir()  # FSDP2 checkpoints are directories, with Lightning's meta.pt
    (tmp_path / "sharded" / "meta.pt").write_bytes(b"shards")
    for fine in (None, "last", str(tmp_path / "sharded")):
        check_checkpoint_file(fine)


def test_a_directory_that_is_not_a_sharded_checkpoint_is_named(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    with pytest.raises(IsADirectoryError) as caught:
        check_checkpoint_file(str(tmp_path / "run"))
    assert str(caught.value) == (
        f"checkpoint {tmp_path / 'run'} is a directory but not a sharded (FSDP2) checkpoint (no meta.pt in it): "
        f"pass the path of a .ckpt file, e.g. {tmp_path / 'run/checkpoints/last.ckpt'}, or --ckpt_path=last"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "trainer:\n  max_steps: [1, 2\nmodel:\n  x: 1\n",
            "line 3, column 6: expected ',' or ']', but got ':' (while parsing a flow sequence opened on line 2): "
            "fix the file there",
        ),
        (
            "trainer:\n\tmax_steps: 1\n",
            "line 2, column 1: found character '\\t' that cannot start any token (YAML indents with spaces, never "
            "tabs): fix the file there",
        ),
    ],
    ids=["unclosed-bracket", "tab"],
)
def test_a_yaml_syntax_error_names_the_config_file_and_line(tmp_path, capsys, monkeypatch, text, message):
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SystemExit):
        main(["fit", f"--config={REPO / 'recipes/minirl.yaml'}", "--config", str(bad)])
    assert f"error: config file {bad} is not valid YAML: {message}" in capsys.readouterr().err


LOLS = ", ".join(["lol"] * 10)
LAUGHS = f"a0: &a0 [{LOLS}]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))


@pytest.mark.parametrize(
    ("text", "size"),
    [(LAUGHS, "to 1,234,567,900 values"), ("a: &a [1, *a]\n", "without end (an alias inside its own anchor)")],
    ids=["billion-laughs", "alias-in-its-own-anchor"],
)
def test_yaml_aliases_nested_in_anchors_are_refused_before_any_walk(tmp_path, capsys, monkeypatch, text, size):
    """Nine lines of aliases nested in anchors expand to a billion values: the settings walk spun through them at
    100% CPU (a cycle: a RecursionError). Their size is counted in time linear in the file, and refused."""
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    with pytest.raises(SystemExit):
        main(["fit", f"--config={REPO / 'recipes/minirl.yaml'}", "--config", str(bomb)])
    assert capsys.readouterr().err.endswith(
        f"error: config file {bomb} expands {size} through its YAML aliases (*name) nested in anchors (&name), a "
        "'billion laughs'; a config holds at most 100,000: write the settings out, or nest fewer aliases\n"
    )


def test_aliases_of_a_few_values_are_kept(tmp_path):
    config = tmp_path / "aliases.yaml"
    config.write_text("lr: &lr 0.001\ngroups: &g [1, 2]\nmodel:\n  init_args:\n    lr: *lr\n    g: [*g, *g]\n")
    assert syntax_error(config) is None


@pytest.mark.parametrize(
    ("old_yaml", "in_file", "old_arg", "on_command_line"),
    [
        (  # "benchmarks" are the performance scripts now
            "data:\n  init_args:\n    benchmarks:\n      heldout: null\n",
            "data.init_args.benchmarks is now data.init_args.eval_sets: rename it there",
            "--data.init_args.benchmarks={}",
            "error: --data.init_args.benchmarks is now --data.init_args.eval_sets",
        ),
        (  # RL moved beside SFT (stable_rl.rl)
            "model:\n  class_path: stable_rl.module.PolicyModule\n",
            "model.class_path: stable_rl.module.PolicyModule is now stable_rl.rl.PolicyModule",
            "--data.class_path=stable_rl.data.RolloutDataModule",
            "--data.class_path: stable_rl.data.RolloutDataModule is now stable_rl.rl.RolloutDataModule",
        ),
        (  # the policy's runtime switches, one group (stable_rl.policy.runtime.ModelRuntime)
            "model:\n  init_args:\n    compile_layers: true\n",
            "model.init_args.compile_layers is now model.init_args.runtime.compile_layers: rename it there",
            "--model.init_args.packed_sequences=true",
            "error: --model.init_args.packed_sequences is now --model.init_args.runtime.packed_sequences",
        ),
        (  # the batch sizes are the data module's alone (stable_rl.batch_plan)
            "model:\n  init_args:\n    mini_batch_size: 32\n",
            "model.init_args.mini_batch_size is now data.init_args.mini_batch_size: rename it there",
            "--model.init_args.micro_batch_size=4",
            "error: --model.init_args.micro_batch_size is now --data.init_args.micro_batch_size",
        ),
    ],
    ids=["renamed-setting", "moved-class", "runtime-group", "batch-geometry"],
)
def test_an_old_name_is_told_its_new_one(tmp_path, capsys, monkeypatch, old_yaml, in_file, old_arg, on_command_line):
    """A config file or a command line with a renamed setting or a moved class path is told the new name, not
    only that the key is unknown or the class cannot be found."""
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    old = tmp_path / "old.yaml"
    old.write_text(old_yaml)
    base = f"--config={REPO / 'recipes/minirl.yaml'}"
    with pytest.raises(SystemExit):
        main(["fit", base, f"--config={old}"])
    assert f"error: {old}: {in_file}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit", base, old_arg])
    assert on_command_line in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "base"),
    [
        ("optimizer", "torch.optim.Optimizer (e.g. torch.optim.AdamW)"),
        ("lr_scheduler", "torch.optim.lr_scheduler.LRScheduler (e.g. torch.optim.lr_scheduler.LinearLR)"),
    ],
    ids=["optimizer", "lr_scheduler"],
)
def test_a_function_named_as_a_components_class_is_refused_before_it_is_called(tmp_path, monkeypatch, setting, base):
    """jsonargparse takes a function as the class_path of a callable setting and called it, with its init_args,
    when it built the objects: here a shell command."""
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    ran = tmp_path / "ran"
    config = tmp_path / "shell.yaml"
    config.write_text(
        f"model:\n  init_args:\n    {setting}:\n      class_path: subprocess.getoutput\n"
        f"      init_args:\n        cmd: touch {ran}\n"
    )
    with pytest.raises(ValueError) as caught:
        main(["fit", f"--config={REPO / 'recipes/minirl.yaml'}", f"--config={config}"])
    assert str(caught.value) == (
        f"model.init_args.{setting}.class_path: subprocess.getoutput is not a subclass of {base}: a class_path "
        "names the class of the component to build, never a function to call"
    )
    assert not ran.exists()


def test_every_class_path_names_a_class_of_its_kind():
    config = {
        "model": {"class_path": "os.getcwd"},
        "trainer": {
            "callbacks": [{"class_path": "stable_rl.callbacks.TrainingReport"}, {"class_path": "torch.nn.Linear"}]
        },
    }
    with pytest.raises(ValueError, match=r"^model.class_path: os.getcwd is not a class: a class_path names the class"):
        check_components(config)
    config["model"]["class_path"] = "stable_rl.rl.PolicyModule"
    with pytest.raises(ValueError) as caught:
        check_components(config)
    assert str(caught.value).startswith(
        "trainer.callbacks[1].class_path: torch.nn.Linear is not a subclass of lightning.pytorch.callbacks.Callback "
        "(e.g. lightning.pytorch.callbacks.ModelCheckpoint)"
    )
    config["trainer"]["callbacks"].pop()
    check_components(config)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"cut.ckpt is empty \(a save cut off by a crash or a full disk\): resume from another one"),
        (
            b"PK\x03\x04 half a zip",
            r"cut.ckpt cannot be read \(.*\): a damaged file \(a save or copy cut off\) or not a checkpoint of "
            r"stable-rl's: resume from another one, e.g. an earlier step's, or --ckpt_path=last",
        ),
    ],
    ids=["empty", "damaged"],
)
def test_an_empty_or_damaged_checkpoint_is_named_from_the_command_line(tmp_path, monkeypatch, content, message):
    """Named before anything is built (Lightning's CLI loaded it first: torch's bare EOFError, or its advice to
    load with weights_only=False)."""
    monkeypatch.setattr("sys.argv", ["stable-rl"])
    (tmp_path / "cut.ckpt").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        main(["fit", f"--config={REPO / 'recipes/minirl.yaml'}", f"--ckpt_path={tmp_path / 'cut.ckpt'}"])
