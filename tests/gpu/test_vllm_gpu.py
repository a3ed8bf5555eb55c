"""The vLLM engine on a CUDA GPU (vLLM 0.26 on an H100 as recorded in benchmarks/RESULTS.md): start and
sampling in float32 and bfloat16, eager and with CUDA graphs; log mu_old against the HF policy on the same
GPU; weight sync; R3 routes against the HF router; FP8 rollouts after a sync; memory freed by ``close``.
Run on the GPU machine by ``tests/gpu/run.sh``; skipped without a GPU."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from stable_rl.data.template import PromptTemplate
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout import RolloutBatch, Sampling, VLLMEngine
from stable_rl.rollout.vllm_compat import PER_CHANNEL_FP8, VLLMPlatform
from stable_rl.routing import RouterHooks, routed_positions, routes_match

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.vllm,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

KV = 1 << 30  # a small KV cache per engine: tests start many
QUESTIONS = ("Calculate 5 - 3 - 6.", "What is 12 + 30?", "Calculate 17 + 4 - 9 + 33 - 12 + 8 - 21 + 6.")


def prompts(tokenizer) -> list[list[int]]:
    """Three prompts of 25-45 tokens: longer than one KV block (16 tokens), so a stale cache would show."""
    return [PromptTemplate().encode(tokenizer, q) for q in QUESTIONS]


def policy(path: str, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).cuda().eval()


def logprob_gap(model, samples, group_size: int, temperature: float = 1.0) -> torch.Tensor:
    """|log pi - log mu| of every response token: the HF policy's log-prob of the engine's samples."""
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), group_size, 0, temperature, 0)
    ids, attention, response = (t.cuda() for t in (batch.input_ids, batch.attention_mask, batch.response_mask))
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(model, ids, attention, response, temperature)
    return (logprobs.cpu() - batch.rollout_logprobs)[batch.response_mask].abs()


def perturb_(model, seed: int = 0) -> None:
    """An update that moves every weight, experts included."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, device=p.device, generator=g, dtype=p.dtype))


def route_agreement(model, samples, group_size: int) -> float:
    """Fraction of (token, MoE layer) whose engine top-k set is the HF router's on the same tokens."""
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), group_size, 0, 1.0, 0)
    hooks = RouterHooks(model)
    ids, attention = batch.input_ids.cuda(), batch.attention_mask.cuda()
    with torch.no_grad(), hooks.record(ids):
        model(input_ids=ids, attention_mask=attention)
    needed = routed_positions(attention)
    assert (batch.routes.cuda()[needed] >= 0).all()  # every token but the last has a route
    assert (batch.routes[~needed.cpu()] == -1).all()
    return routes_match(hooks.own, batch.routes.cuda())[needed].float().mean().item()


@pytest.fixture(scope="module")
def float32_engine(tiny_model_path):
    engine = VLLMEngine(
        sleep_mode=False, enforce_eager=True, max_new_tokens=48, dtype="float32", seed=3, kv_cache_memory_bytes=KV
    )  # eager: float32 compiles for ~2 minutes; the bfloat16 and R3 tests cover CUDA graphs
    engine.start(tiny_model_path, max_model_len=128)
    yield engine
    engine.close()


def test_float32_engine_matches_the_float32_policy_before_and_after_a_sync(float32_engine, tiny_model_path, tokenizer):
    """The float32 engine is the "no mismatch" control: log mu_old equals the HF policy's log-prob on the
    same GPU to float32 rounding, also after a weight sync with prompts longer than one KV block."""
    model = policy(tiny_model_path)
    ids = prompts(tokenizer)
    samples = float32_engine.generate(ids, group_size=4, step=0)
    assert max(len(p) for p in ids) > 16 and len(samples) == 12
    before = logprob_gap(model, samples, 4)
    print(f"float32 engine vs float32 policy: max |d log p| {before.max():.2e}, mean {before.mean():.2e}")
    assert before.max() < 1e-4
    perturb_(model)
    assert logprob_gap(model, samples, 4).max() > 0.05  # the old samples are stale now
    float32_engine.sync(model.state_dict().items(), version=1)
    after = logprob_gap(model, float32_engine.generate(ids, group_size=4, step=1), 4)
    print(f"after a sync: max |d log p| {after.max():.2e}")
    assert after.max() < 1e-4


def test_same_step_and_seed_give_the_same_samples(float32_engine, tokenizer):
    """``request_seeds=True``: a seed per request."""
    ids = prompts(tokenizer)
    setting, float32_engine.request_seeds = float32_engine.request_seeds, True
    try:
        first = float32_engine.generate(ids, group_size=2, step=7)
        again = float32_engine.generate(ids, group_size=2, step=7)
        other = float32_engine.generate(ids, group_size=2, step=8)
    finally:
        float32_engine.request_seeds = setting
    assert [s.response_ids for s in first] == [s.response_ids for s in again]
    assert [s.logprobs for s in first] == [s.logprobs for s in again]
    assert [s.response_ids for s in first] != [s.response_ids for s in other]


def test_one_seed_per_call_repeats_a_step_and_leaves_the_cuda_rng_alone(float32_engine, tokenizer):
    """``request_seeds=False`` (the GPU default): vLLM samples the batch at once from this process's CUDA
    generator, seeded from the step for the call and put back after it (vLLM's asynchronous scheduling on)."""
    ids = prompts(tokenizer)
    setting, float32_engine.request_seeds = float32_engine.request_seeds, False
    try:
        torch.cuda.manual_seed(0)
        undisturbed = torch.rand(4, device="cuda")
        torch.cuda.manual_seed(0)
        first = float32_engine.generate(ids, group_size=4, step=7)
        assert torch.equal(torch.rand(4, device="cuda"), undisturbed)
        again = float32_engine.generate(ids, group_size=4, step=7)
        other = float32_engine.generate(ids, group_size=4, step=8)
    finally:
        float32_engine.request_seeds = setting
    responses = [s.response_ids for s in first]
    assert responses == [s.response_ids for s in again]
    assert [s.logprobs for s in first] == [s.logprobs for s in again]
    assert responses != [s.response_ids for s in other]
    assert all(len({tuple(r) for r in responses[i : i + 4]}) > 1 for i in (0, 4, 8))  # draws, not copies


def test_an_in_place_sync_loads_what_vllms_reload_loads(tiny_model_path, tokenizer):
    """On a Hopper GPU an unquantized engine's experts run on Triton, which keeps loaded weights as they are: a
    sync writes them in place (``reload_weights`` None) and samples exactly what vLLM's layerwise reload of the
    same weights samples. (From sleep, as the training loop syncs: the sleeping-engine test, which must hold
    the process's one sleep-mode engine.)"""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("vLLM runs unquantized experts on Triton by default on Hopper only (elsewhere it reloads)")
    engine = VLLMEngine(max_new_tokens=24, dtype="bfloat16", seed=3, kv_cache_memory_bytes=KV, sleep_mode=False)
    engine.start(tiny_model_path, max_model_len=128)
    model = policy(tiny_model_path, dtype=torch.bfloat16)
    perturb_(model, seed=4)
    try:
        assert engine.in_place
        before = engine.generate(prompts(tokenizer), group_size=4, step=2)
        samples = {}
        for reload in (False, True):
            engine.reload_weights = reload
            engine.sync(model.state_dict().items(), version=1 + reload)
            samples[reload] = engine.generate(prompts(tokenizer), group_size=4, step=2)
    finally:
        engine.close()
    assert [s.response_ids for s in samples[False]] == [s.response_ids for s in samples[True]]
    assert [s.logprobs for s in samples[False]] == [s.logprobs for s in samples[True]]
    model.float()  # the bfloat16 weights synced above, read in float32
    gap, stale = logprob_gap(model, samples[False], 4), logprob_gap(model, before, 4)
    print(f"bfloat16 engine vs the policy: mean |d log p| {gap.mean():.4f} synced, {stale.mean():.4f} before")
    assert gap.mean() < stale.mean() / 3  # the policy's weights, not the start's


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "cuda-graphs"])
def test_bfloat16_engine_samples_near_the_policy(tiny_model_path, tokenizer, eager):
    """bfloat16 rollouts (eager and with CUDA graphs) against the float32 policy: a real but small gap."""
    engine = VLLMEngine(
        sleep_mode=False, max_new_tokens=48, dtype="bfloat16", seed=3, kv_cache_memory_bytes=KV, enforce_eager=eager
    )
    engine.start(tiny_model_path, max_model_len=128)
    samples = engine.generate(prompts(tokenizer), group_size=8, step=0)
    engine.close()
    assert all(1 <= len(s.response_ids) == len(s.logprobs) <= 48 for s in samples)
    gap = logprob_gap(policy(tiny_model_path), samples, 8)
    print(f"bfloat16 engine ({'eager' if eager else 'CUDA graphs'}) vs float32 policy: mean {gap.mean():.4f}")
    assert 1e-4 < gap.mean().item() < 0.05


@pytest.mark.parametrize(
    ("dtype", "eager", "prefix_caching"),
    [("float32", True, None), ("float32", True, True), ("bfloat16", False, None)],
    ids=["float32-eager", "float32-prefix-cached", "bfloat16-cuda-graphs"],
)
def test_r3_routes_are_the_hf_routers_choice_before_and_after_a_sync(
    tiny_model_path, tokenizer, dtype, eager, prefix_caching
):
    """vLLM's own routes (``enable_return_routed_experts``) of every prompt and response token but the last,
    against the HF router on the same tokens and weights, before and after a sync; with prefix caching on,
    the G samples of a prompt share its cached blocks, whose routes come from the request that computed
    them. A float32 engine agrees on nearly every choice (near-ties aside); bfloat16 on most."""
    engine = VLLMEngine(
        sleep_mode=False,
        max_new_tokens=32,
        dtype=dtype,
        seed=3,
        kv_cache_memory_bytes=KV,
        enforce_eager=eager,
        prefix_caching=prefix_caching,
        return_routes=True,
    )
    engine.start(tiny_model_path, max_model_len=128)
    model = policy(tiny_model_path)
    floor = 0.99 if dtype == "float32" else 0.95
    for step in (0, 1):
        if step:
            perturb_(model, seed=1)
            engine.sync(model.state_dict().items(), version=step)
        samples = engine.generate(prompts(tokenizer), group_size=4, step=step)
        agreement = route_agreement(model, samples, 4)
        print(f"{dtype} routes, step {step}: agreement {agreement:.4f}")
        assert agreement > floor
    evaluation = engine.generate(prompts(tokenizer), group_size=2, step=2, sampling=Sampling(max_new_tokens=8))
    assert all(s.routes is None for s in evaluation)
    engine.close()


def test_routes_of_a_model_with_dense_layers_are_its_moe_layers(tiny_partly_dense_path, tokenizer):
    """Qwen3-MoE with ``mlp_only_layers`` [1]: vLLM returns a column per hidden layer (the dense one empty);
    the engine keeps the 3 MoE layers', matching the HF router of each."""
    engine = VLLMEngine(sleep_mode=False, max_new_tokens=24, seed=3, kv_cache_memory_bytes=KV, return_routes=True)
    engine.start(tiny_partly_dense_path, max_model_len=128)
    samples = engine.generate(prompts(tokenizer), group_size=2, step=0)
    engine.close()
    assert samples[0].routes.shape[1:] == (3, 2)
    assert route_agreement(policy(tiny_partly_dense_path), samples, 2) > 0.99


def fp8_engine(scheme: str) -> VLLMEngine:
    """The FP8 test's engine (seed 5): a synced one and fresh ones must be set up alike."""
    return VLLMEngine(
        sleep_mode=False, max_new_tokens=32, dtype="bfloat16", seed=5, kv_cache_memory_bytes=KV, quantization=scheme
    )


def fresh_samples(path: str, scheme: str, tokenizer):
    """What an FP8 engine started on the weights at ``path`` samples (step 1)."""
    engine = fp8_engine(scheme)
    engine.start(path, max_model_len=128)
    try:
        return engine.generate(prompts(tokenizer), group_size=4, step=1)
    finally:
        engine.close()


def max_logprob_difference(a, b) -> float:
    return float(np.abs(np.concatenate([s.logprobs for s in a]) - np.concatenate([s.logprobs for s in b])).max())


@pytest.mark.parametrize("scheme", ["fp8_per_tensor", "fp8_per_channel"])
def test_fp8_engine_after_a_sync_samples_what_a_fresh_engine_on_the_synced_weights_samples(
    tiny_model_path, tokenizer, tmp_path, scheme
):
    """vLLM re-quantizes synced weights as it quantizes loaded ones: same tokens, same log-probs. Per-channel
    FP8 needs vLLM >= 0.33 (0.26 fails loading it): older releases refuse it, naming the fix."""
    if scheme == "fp8_per_channel" and VLLMPlatform.installed().version < PER_CHANNEL_FP8:
        with pytest.raises(ValueError, match=r"needs vLLM >= 0.33 .* use quantization: fp8_per_tensor"):
            VLLMEngine(sleep_mode=False, dtype="bfloat16", quantization=scheme).start(
                tiny_model_path, max_model_len=128
            )
        return
    synced = fp8_engine(scheme)
    synced.start(tiny_model_path, max_model_len=128)
    assert not synced.in_place  # vLLM quantizes after loading: the sync reloads
    model = policy(tiny_model_path, dtype=torch.bfloat16)
    perturb_(model, seed=2)
    synced.sync(model.state_dict().items(), version=1)
    from_sync = synced.generate(prompts(tokenizer), group_size=4, step=1)
    synced.close()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_start = [fresh_samples(str(tmp_path), scheme, tokenizer) for _ in range(2)]
    for samples in (from_sync, from_start[1]):
        assert [s.response_ids for s in samples] == [s.response_ids for s in from_start[0]]
    between_fresh = max_logprob_difference(from_start[0], from_start[1])
    sync_to_fresh = max_logprob_difference(from_sync, from_start[0])
    print(f"{scheme}: max |d log p| synced vs fresh {sync_to_fresh:.2e}, fresh vs fresh {between_fresh:.2e}")
    # Exact where two fresh engines agree exactly; where they do not (kernels chosen per engine), within twice
    # their difference.
    assert sync_to_fresh <= 2 * between_fresh and between_fresh < 1e-2
    gap = logprob_gap(model.float(), from_sync, 4)
    print(f"{scheme} engine vs the bfloat16 policy (in float32): mean |d log p| {gap.mean():.4f}")
    assert gap.mean() > 1e-3  # FP8 is a real mismatch


def test_close_frees_the_gpu_memory_for_the_next_engine(tiny_model_path, tokenizer):
    """An engine sized by ``gpu_memory_utilization`` takes ~12 GiB of KV cache; closed, it gives it back,
    and a second engine in the same process passes vLLM's memory check. In sleep mode (the GPU default) too:
    vLLM's sleep-mode allocator takes one engine per process, and a closed one leaves it empty. (The other
    tests turn sleep mode off: their engines live side by side.)"""
    free_before = torch.cuda.mem_get_info()[0]
    engine = VLLMEngine(max_new_tokens=16, dtype="bfloat16", gpu_memory_utilization=0.15)
    try:
        engine.start(tiny_model_path, max_model_len=128)
        held = free_before - torch.cuda.mem_get_info()[0]
        engine.close()
        left = free_before - torch.cuda.mem_get_info()[0]
        print(f"engine held {held / 2**30:.2f} GiB; after close {left / 2**30:.2f} GiB")
        assert held > 5 * 2**30 and left < 0.5 * 2**30
        engine.start(tiny_model_path, max_model_len=128)
        assert len(engine.generate(prompts(tokenizer), group_size=2, step=0)) == 6
    finally:  # a failure here must not leave a sleep-mode engine for the next test
        engine.close()


def test_a_sleeping_engine_frees_its_memory_and_samples_as_if_it_never_slept(tiny_model_path, tokenizer):
    """Sleep mode (level 2, CUDA graphs, R3 routes): asleep, the engine gives back its KV cache and weights;
    woken by the next sync, it samples exactly what it sampled awake on the same weights: same tokens,
    log-probs and routes."""
    engine = VLLMEngine(
        max_new_tokens=32, dtype="bfloat16", seed=7, gpu_memory_utilization=0.15, sleep_mode=True, return_routes=True
    )
    try:
        engine.start(tiny_model_path, max_model_len=128)
        model = policy(tiny_model_path, dtype=torch.bfloat16)
        perturb_(model, seed=4)
        engine.sync(model.state_dict().items(), version=1)
        awake = engine.generate(prompts(tokenizer), group_size=3, step=1)
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        freed = torch.cuda.mem_get_info()[0] - free_awake
        engine.sync(model.state_dict().items(), version=1)
        woken = engine.generate(prompts(tokenizer), group_size=3, step=1)
    finally:
        engine.close()
    print(f"sleep freed {freed / 2**30:.2f} GiB")
    assert freed > 5 * 2**30  # the KV cache of gpu_memory_utilization 0.15 (~12 GiB), and the weights
    assert [s.response_ids for s in woken] == [s.response_ids for s in awake]
    assert np.array_equal(np.concatenate([s.logprobs for s in woken]), np.concatenate([s.logprobs for s in awake]))
    assert all(np.array_equal(w.routes, a.routes) for w, a in zip(woken, awake, strict=True))
