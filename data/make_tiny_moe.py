"""Build the embedded default policy: a tiny Qwen3-MoE with its own byte-level BPE tokenizer.

Run from the repository root (deterministic for a given seed):

    python data/make_tiny_moe.py --out data/tiny-qwen3-moe --seed 0

The tokenizer is trained on reasoning-gym problems (the same generators the recipes train on)
plus the chat template's words, so a ~2k vocabulary covers the task text; byte-level BPE keeps
every string encodable. The weights are a random initialisation of `Qwen3MoeForCausalLM`
(no pretrained tiny MoE is installable offline); issue-level cold starts fine-tune from it.
"""

import argparse
import json
from pathlib import Path

import reasoning_gym
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
GENERATORS = ["basic_arithmetic", "chain_sum", "gsm_symbolic", "simple_equations", "decimal_arithmetic"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus(seed: int, per_generator: int = 2000):
    """Yield training text for the tokenizer: problems, answers, worked solutions, template words."""
    yield "Solve the problem. Put the final answer in \\boxed{}. The answer is \\boxed{-12.5}."
    for name in GENERATORS:
        for row in reasoning_gym.create_dataset(name, size=per_generator, seed=seed):
            yield row["question"]
            yield f"The answer is \\boxed{{{row['answer']}}}."
            yield row["metadata"].get("answer_cot", "")


def build_tokenizer(seed: int, vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> Qwen3MoeForCausalLM:
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention needs head_dim >= 32
        intermediate_size=256,
        moe_intermediate_size=128,
        num_local_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/tiny-qwen3-moe"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=2048)
    args = parser.parse_args()
    tokenizer = build_tokenizer(args.seed, args.vocab_size)
    model = build_model(tokenizer, args.seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(args.out)
    model.save_pretrained(args.out)
    params = sum(p.numel() for p in model.parameters())
    (args.out / "PROVENANCE.json").write_text(
        json.dumps({"script": "data/make_tiny_moe.py", "seed": args.seed, "parameters": params}, indent=2) + "\n"
    )
    print(f"wrote {args.out}: {params / 1e6:.2f}M parameters, vocab {len(tokenizer)}")


if __name__ == "__main__":
    main()
