"""A bad model directory is named with its fix before anything loads it: when a data module is about to load its
tokenizer (the first thing a run loads, before any engine starts), and when the policy module is about to load
its weights (training on given token ids needs no tokenizer)."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from stable_rl.data import ReasoningGymPrompts
from stable_rl.policy.model_dir import check_model_dir, checked_tokenizer
from stable_rl.rl import PolicyModule, RolloutDataModule
from stable_rl.rollout import HFEngine


def refusal(model_path) -> str:
    """The message of checking ``model_path`` before the policy module loads it (it builds without looking)."""
    PolicyModule(str(model_path))
    with pytest.raises((FileNotFoundError, ValueError)) as caught:
        check_model_dir(str(model_path))
    assert tokenizer_refusal(model_path) == str(caught.value)  # the data modules check it first
    return str(caught.value)


def test_a_missing_directory_names_the_resolved_path_and_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = refusal("models/nope")
    assert message.startswith(
        f"model directory models/nope not found: there is no {tmp_path}/models/nope (a relative model_path is read "
        f"from the working directory, {tmp_path}), and no hub model of that name could be loaded ("
    )
    assert message.endswith("). Set model.init_args.model_path to the model's directory")  # the hub's error between
    with pytest.raises(FileNotFoundError) as caught:
        PolicyModule("models/nope").configure_model()  # before the weights load
    assert str(caught.value) == message


def test_the_rollout_data_module_names_a_missing_directory_before_reading_its_context(tmp_path, monkeypatch):
    """Its context check (prompt + response within max_position_embeddings) is the first load of the model's
    config: it showed the hub's connection error, not the missing path."""
    monkeypatch.chdir(tmp_path)
    data = RolloutDataModule(
        ReasoningGymPrompts(["chain_sum"], size=8, seed=3), engine=HFEngine(), prompts_per_step=2, model_path="nope"
    )
    data.trainer = SimpleNamespace(global_rank=0, local_rank=0, world_size=1, num_devices=1)
    with pytest.raises(FileNotFoundError) as caught:
        data.setup("fit")
    assert str(caught.value) == refusal("nope")


def test_a_relative_path_of_the_checkout_run_from_elsewhere_says_where_it_exists(tmp_path, monkeypatch):
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found: there is no") as caught:
        check_model_dir("data/tiny-qwen3-moe")
    assert f" It exists as {repo}/data/tiny-qwen3-moe: run from {repo} or give that path." in str(caught.value)


def tokenizer_refusal(model_path) -> str:
    """The message of checking the tokenizer of ``model_path`` (what the data modules do before loading it)."""
    with pytest.raises((FileNotFoundError, ValueError)) as caught:
        checked_tokenizer(str(model_path))
    return str(caught.value)


def copy_of(model_path: str, to: Path, leave_out: tuple[str, ...] = ()) -> Path:
    shutil.copytree(model_path, to, ignore=lambda _, names: [n for n in names if n in leave_out])
    return to


def test_a_directory_without_tokenizer_files_is_refused(tiny_model_path, tmp_path):
    path = copy_of(tiny_model_path, tmp_path / "m", leave_out=("tokenizer.json", "tokenizer_config.json"))
    PolicyModule(str(path))  # training on given token ids needs no tokenizer (e.g. synthetic benchmarks)
    assert tokenizer_refusal(path) == (
        f"model directory {path} has no tokenizer.json or tokenizer.model or vocab.json: copy the config and "
        "tokenizer files from the model the weights came from (its save_pretrained), or set "
        "model.init_args.model_path to a complete model directory"
    )


def test_a_directory_without_config_is_refused(tiny_model_path, tmp_path):
    path = copy_of(tiny_model_path, tmp_path / "m", leave_out=("config.json",))
    assert refusal(path).startswith(f"model directory {path} has no config.json: copy the config and tokenizer")


def test_a_tokenizer_beyond_the_models_vocabulary_is_refused(tiny_model_path, tmp_path):
    path = copy_of(tiny_model_path, tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"vocab_size": 1000}))
    assert tokenizer_refusal(path) == (
        f"the tokenizer of {path} has ids up to 2047, beyond the model's vocabulary of 1000 (vocab_size in its "
        "config.json): a tokenizer of another model? Use the tokenizer the model was trained with, or resize the "
        "model's embeddings to the tokenizer (resize_token_embeddings, then save_pretrained)"
    )


def test_the_shipped_model_passes(tiny_model_path):
    check_model_dir(tiny_model_path)
    checked_tokenizer(tiny_model_path)
