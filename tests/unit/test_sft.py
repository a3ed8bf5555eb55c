"""The cold start: packing, the SFT loss against HF's own causal-LM loss, and the atomic HF export."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from stable_rl.callbacks import HFExport
from stable_rl.data import ReasoningGymPrompts
from stable_rl.data.solutions import worked_solution
from stable_rl.policy.module import HFPolicyModule
from stable_rl.sft import SFTDataModule, SFTModule, TokenBatch


def test_pack_right_pads_and_marks_responses():
    batch = TokenBatch.pack([([5, 6], [7, 8, 9]), ([5], [7])], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 7, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[True] * 5, [True, True, False, False, False]]
    assert batch.response_mask.tolist() == [[False, False, True, True, True], [False, True, False, False, False]]


def test_sft_loss_is_hf_causal_lm_loss_on_response_tokens(tiny_model_path):
    module = SFTModule(tiny_model_path)
    module.configure_model()
    batch = TokenBatch.pack([([1, 50, 60, 70], [80, 90, 2]), ([1, 55], [66, 2])], pad_token_id=0)
    labels = batch.input_ids.masked_fill(~batch.response_mask, -100)
    with torch.no_grad():
        expected = module.policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss
        got = module._loss(batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def exporter(model_path: str) -> HFPolicyModule:
    module = HFPolicyModule(model_path)
    module.configure_model()
    return module


def test_hf_export_replaces_the_directory_whole(tiny_model_path, tmp_path):
    target = tmp_path / "export"
    module = exporter(tiny_model_path)
    HFExport(str(target)).on_train_end(trainer=SimpleNamespace(global_rank=0), pl_module=module)
    (target / "model-00002-of-00002.safetensors").write_bytes(b"x")  # a shard of a larger earlier export
    HFExport(str(target)).setup(None, module, "fit")  # accepted: it is an earlier export
    with torch.no_grad():
        module.policy.lm_head.weight.add_(1.0)
    HFExport(str(target)).on_train_end(trainer=SimpleNamespace(global_rank=0), pl_module=module)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no .partial / .old left
    assert not (target / "model-00002-of-00002.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(target)
    torch.testing.assert_close(loaded.lm_head.weight, module.policy.lm_head.weight)
    assert (target / "tokenizer.json").exists()


def test_hf_export_refuses_a_target_it_would_wipe(tmp_path):
    (tmp_path / "run_a").mkdir()
    (tmp_path / "run_a" / "metrics.csv").write_text("step\n")
    with pytest.raises(ValueError, match=r"holds files that are not an earlier export .* choose a new or empty"):
        HFExport(str(tmp_path)).setup(None, None, "fit")  # e.g. dirpath: runs
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"is a file: choose a directory"):
        HFExport(str(tmp_path / "model.bin")).setup(None, None, "fit")
    (tmp_path / "empty").mkdir()
    for fine in ("empty", "new"):
        HFExport(str(tmp_path / fine)).setup(None, None, "fit")
    assert (tmp_path / "run_a" / "metrics.csv").read_text() == "step\n"


@pytest.mark.parametrize("generator", ["basic_arithmetic", "chain_sum"])
def test_sft_pairs_are_prompt_then_solution_then_eos(tiny_model_path, tokenizer, generator):
    prompts = ReasoningGymPrompts([generator], size=8, seed=3, max_terms=2, max_digits=1)
    data = SFTDataModule(prompts, val_size=2, model_path=tiny_model_path)
    data.setup("fit")
    prompt, response = data.pairs[0]
    text = tokenizer.decode(prompt + response)
    assert text.startswith("<|im_start|>user\n") and text.endswith("}<|im_end|>")
    assert "<|im_start|>assistant\n" in tokenizer.decode(prompt)
    assert "\\boxed{" in tokenizer.decode(response)


def test_direct_fraction_answers_that_share_of_problems_with_the_boxed_answer_alone(tiny_model_path, tokenizer):
    """The mixed-style cold start: seeded, about the share asked for, the rest with worked steps."""

    def responses(fraction: float, seed: int = 0) -> list[str]:
        prompts = ReasoningGymPrompts(["chain_sum"], size=200, seed=3, max_terms=3, max_digits=2)
        data = SFTDataModule(prompts, val_size=2, seed=seed, direct_fraction=fraction, model_path=tiny_model_path)
        data.setup("fit")
        return [tokenizer.decode(response, skip_special_tokens=True) for _, response in data.pairs]

    steps, mixed = responses(0.0), responses(0.5)
    direct = [m for m in mixed if m.startswith("\\boxed{")]
    assert not any(s.startswith("\\boxed{") for s in steps)
    assert 80 <= len(direct) <= 120  # 200 problems, each direct with probability 1/2
    for full, answer in zip(steps, mixed, strict=True):
        assert answer in (full, full.splitlines()[-1])  # either the worked solution or its last line
    assert mixed == responses(0.5) and mixed != responses(0.5, seed=1)
    with pytest.raises(ValueError, match=r"direct_fraction=1.5 must be in \[0, 1\]"):
        SFTDataModule(ReasoningGymPrompts(["chain_sum"]), direct_fraction=1.5)


def test_unboxed_fraction_states_that_share_of_answers_without_the_box(tiny_model_path, tokenizer):
    """The format-error cold start: the same steps, the last line "The answer is N." instead of \\boxed{N}."""
    prompts = ReasoningGymPrompts(["chain_sum"], size=200, seed=3, max_terms=3, max_digits=2)

    def responses(fraction: float) -> list[str]:
        data = SFTDataModule(prompts, val_size=2, unboxed_fraction=fraction, model_path=tiny_model_path)
        data.setup("fit")
        return [tokenizer.decode(response, skip_special_tokens=True) for _, response in data.pairs]

    boxed, mixed = responses(0.0), responses(0.5)
    unboxed = 0
    for full, answer in zip(boxed, mixed, strict=True):
        *steps, last = full.splitlines()
        if answer != full:
            gold = last.removeprefix("\\boxed{").removesuffix("}")
            assert answer.splitlines() == [*steps, f"The answer is {gold}."]
            unboxed += 1
    assert 80 <= unboxed <= 120


def test_by_place_trains_on_the_place_value_solutions(tiny_model_path, tokenizer):
    prompts = ReasoningGymPrompts(["chain_sum"], size=8, seed=3, min_terms=6, max_terms=8, min_digits=2, max_digits=3)
    data = SFTDataModule(prompts, val_size=2, by_place=True, model_path=tiny_model_path)
    data.setup("fit")
    responses = [tokenizer.decode(response, skip_special_tokens=True) for _, response in data.pairs]
    assert responses == [worked_solution(row, by_place=True) for row in prompts.rows()]
