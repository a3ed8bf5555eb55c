"""Every private internal of a dependency that stable-rl relies on, behind a small named function.

A Lightning, transformers or standard-library upgrade that renames or changes one of them then fails in
one place, ``tests/unit/test_compat.py``, which checks each assumption on real objects. One file per
dependency: ``lightning.py``, ``transformers.py``, ``process_pool.py``. vLLM's internals (and its
differences by release) are in ``stable_rl.rollout.vllm_compat``, checked by ``tests/unit/test_vllm_compat.py``.
"""
