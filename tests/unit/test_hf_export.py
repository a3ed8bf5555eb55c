"""HFExport never deletes what it did not write: files a user added to an earlier export, or the model the run
trains from."""

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from stable_rl.callbacks import HFExport
from stable_rl.policy.module import HFPolicyModule

WRITER = SimpleNamespace(global_rank=0)


@pytest.fixture(scope="module")
def module(tiny_model_path):
    policy = HFPolicyModule(tiny_model_path)
    policy.configure_model()
    return policy


def test_files_a_user_added_to_an_earlier_export_are_never_deleted(tmp_path, module):
    target = tmp_path / "hf"
    HFExport(str(target)).on_train_end(trainer=WRITER, pl_module=module)
    assert sorted(p.name for p in target.iterdir()) == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    HFExport(str(target)).setup(None, module, "fit")  # an export alone: replaced by the next one
    (target / "README.md").write_text("my model card")
    (target / "eval.json").write_text("{}")
    with pytest.raises(ValueError) as refused:
        HFExport(str(target)).setup(None, module, "fit")
    assert str(refused.value) == (
        f"HFExport dirpath {target} holds files an export does not write (README.md, eval.json), and the "
        f"export replaces the directory whole: move them out of {target}, or choose another directory"
    )
    assert (target / "README.md").read_text() == "my model card"


def test_exporting_into_the_model_directory_the_run_trains_from_is_refused(tmp_path, tiny_model_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_model_path, base)
    policy = HFPolicyModule(str(base))
    for spelling in (str(base), f"{base}/", str(tmp_path / "x" / ".." / "base")):
        with pytest.raises(ValueError) as refused:
            HFExport(spelling).setup(None, policy, "fit")
        assert str(refused.value) == (
            f"HFExport dirpath {Path(spelling)} is the model directory the run trains from (model.init_args.model_path="
            f"{base}): the export would overwrite the base model. Choose another directory, e.g. runs/<name>/hf"
        )
