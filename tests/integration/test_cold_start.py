"""The shipped cold-start checkpoint: loads in both engines, which answer the same greedily."""

from pathlib import Path

import pytest

from stable_rl.data import MathVerifier, PromptTemplate, ReasoningGymPrompts
from stable_rl.rollout import HFEngine, Sampling, VLLMEngine

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.slow  # greedy decoding of the shipped cold starts in two engines: ~16 s
@pytest.mark.vllm
@pytest.mark.parametrize(
    ("cold_start", "boxed", "right"),
    [
        ("tiny-qwen3-moe-sft", range(24, 25), 6),  # always the verifier's format, right on half or more
        ("tiny-qwen3-moe-sft-format", range(1, 24), 1),  # boxes some answers only (format errors)
    ],
)
def test_cold_start_gives_the_same_greedy_answers_in_hf_and_vllm(tokenizer, cold_start, boxed, right):
    pytest.importorskip("vllm")
    problems = ReasoningGymPrompts(
        ["basic_arithmetic", "chain_sum"], size=12, seed=1_000_000, max_terms=3, max_digits=2
    ).load()
    prompts = [PromptTemplate().encode(tokenizer, p.question) for p in problems]
    greedy = Sampling(max_new_tokens=64, temperature=0.0)
    answers = {}
    for engine in (HFEngine(), VLLMEngine()):
        engine.start(str(DATA / cold_start), max_model_len=256)
        samples = engine.generate(prompts, group_size=1, step=0, sampling=greedy)
        answers[type(engine).__name__] = [s.response_ids for s in samples]
        engine.close()
    assert answers["HFEngine"] == answers["VLLMEngine"]
    texts = tokenizer.batch_decode(answers["HFEngine"], skip_special_tokens=True)
    with MathVerifier() as verify:
        correct = verify(texts, [p.answer for p in problems])
    assert sum("\\boxed{" in t for t in texts) in boxed, texts
    assert correct.sum() >= right, texts
