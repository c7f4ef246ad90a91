#!/bin/sh
# scripts/crosscheck/kvslot-plan.sh - 'kvslot plan' step for step against
# vLLM 0.33.0's own scheduler (make crosscheck CROSSCHECK=kvslot-plan).
#
# vLLM's Scheduler.schedule() and update_from_output(), its KVCacheManager,
# BlockPool, free block queue and request block-hash chain run unmodified
# from the release installed by scripts/pyenv crosscheck (build/pyenv/crosscheck), in a
# synchronous engine loop (vllm_plan.py).  Random traces with a fixed seed
# (chunked prefill, preemption, evictions, arrivals, cache salts, LoRA ids,
# block sizes 4 and 16, small pools), each run four ways: prefix caching on
# and off, vLLM's default full-prompt reservation at admission
# (scheduler_reserve_full_isl=True) and without it (False, kvslot
# --no-reserve-full-isl); and the first KVX_ASYNC_TRACES of them the same
# four ways under vLLM's asynchronous scheduling: its AsyncScheduler
# (async_scheduling=True) against 'kvslot plan --async-scheduling'.  A trace passes when every step has the same
# scheduled requests and tokens, computed tokens, block tables, waiting
# queue, preemptions, finishes and free blocks, and with prefix caching the
# same cached tokens, shared blocks and evicted hashes.  Prompts of
# max_model_len tokens or more are checked to be refused by both (vLLM's
# InputProcessor._validate_prompt_len; kvslot exit 2).
#
# What stands in for the rest of an engine (nothing else is replaced):
#   - the engine loop: EngineCore.step's order (add the requests arriving at
#     this step, schedule(), the model runner, update_from_output()), one
#     batch in flight (async_scheduling=False);
#   - the asynchronous engine loop: EngineCore.run_busy_loop with
#     step_with_batch_queue and its batch queue of two (max_concurrent_batches
#     under async scheduling): add the requests arriving by the next step;
#     if the scheduler has requests, schedule() and queue the batch, and
#     return at once while the queue has room and something ran or more can
#     be scheduled; otherwise update_from_output() with the oldest batch's
#     output.  A schedule() call is a step while some request still has
#     tokens to schedule (kvslot prints no step after that);
#   - the model runner: each scheduled request whose prompt is then complete
#     samples one token, kvslot's id for it (an id no prompt has); a partial
#     prefill samples none; asynchronously, each row the scheduler marks
#     as no prefill chunk samples the request's next output token, handed
#     back when its batch leaves the queue;
#   - the platform: a bare vllm.platforms.interface.Platform reporting "cpu"
#     (vLLM would probe for CUDA); it changes no setting;
#   - the model config: an object with the attributes the scheduler reads
#     (max_model_len, runner_type "generate", no mrope, multimodal,
#     encoder-decoder or diffusion); vLLM's ModelConfig reads a Hugging Face
#     model;
#   - the KV-event publisher (a ZMQ socket upstream): a recorder of the
#     batches the scheduler publishes, for the evicted hashes, named by
#     kvslot's XXH3 chain recomputed from each request's tokens (in the
#     asynchronous loop, the events of each schedule() call, read from the
#     block pool's event list before they are published one step later);
#   - the KV cache config: one full-attention group of num_blocks blocks
#     (what the worker's memory profile would produce).
#
# Environment: KVX_TRACES (default 2500), KVX_ASYNC_TRACES (1000),
# KVX_SEED (20), KVX_JOBS (2).
# Ends with 'N passed, M failed' (one per trace and configuration, plus one
# per refusal case).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "kvslot-plan: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
export VLLM_LOGGING_LEVEL=ERROR PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR PYTHONDONTWRITEBYTECODE=1
"$py" "$KV_TOP/scripts/crosscheck/vllm_plan.py" "$KV_BIN/kvslot" \
    --traces "${KVX_TRACES:-2500}" --async-traces "${KVX_ASYNC_TRACES:-1000}" --seed "${KVX_SEED:-20}" --jobs "${KVX_JOBS:-2}" 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C'
