"""The standalone vLLM control of ``gpu_generation_control.py``: vLLM's own ``LLM.generate`` in a fresh process, its
engine core in a process of its own (``VLLM_ENABLE_V1_MULTIPROCESSING=1``, vLLM's default), vLLM's defaults but
for the settings both sides share: the model and its length, dtype, memory, batch size, and the sampling of
``VLLMEngine`` on a GPU (temperature 1, the sampled tokens' log-probs, token ids without text, no seed per request). Reads one JSON request per line on stdin, answers one JSON line on stdout.

    {"start": {"model": DIR, "dtype": "bfloat16", "max_model_len": 1280, "gpu_memory_utilization": 0.35,
               "max_num_seqs": 256, "seed": 0}}              -> {"started": seconds}
    {"generate": {"prompts": [[ids...], ...], "max_tokens": 1024}}  -> {"tokens": n, "seconds": s}
"""

import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    # The answers get a descriptor of their own; file descriptor 1 goes to stderr, so that nothing vLLM or its
    # engine core process prints reaches them.
    out, llm = os.fdopen(os.dup(1), "w"), None
    os.dup2(2, 1)
    for line in sys.stdin:
        request = json.loads(line)
        if "start" in request:
            start = time.perf_counter()
            llm = LLM(request["start"].pop("model"), **request["start"])
            answer = {"started": time.perf_counter() - start}
        else:
            work = request["generate"]
            prompts = [TokensPrompt(prompt_token_ids=ids) for ids in work["prompts"]]
            params = SamplingParams(temperature=1.0, max_tokens=work["max_tokens"], logprobs=0, detokenize=False)
            start = time.perf_counter()
            outputs = llm.generate(prompts, params, use_tqdm=False)
            seconds = time.perf_counter() - start
            answer = {"tokens": sum(len(o.outputs[0].token_ids) for o in outputs), "seconds": seconds}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
