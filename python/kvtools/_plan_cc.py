"""kvslot.plan(chunk_cache=True): kvslot plan --chunk-cache, seed 001's
position-independent chunk cache step by step, through libkv's
kv_plan_cc_load (the program's option checks, segment lists, pool sizing
and field table) and kv_cc_step."""
import os

import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text

PROG = "kvslot plan"
I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1

# the keywords of plan() that kvslot plan --chunk-cache does not take, with
# the value that means "not given"
NOT_CC = (("prompt_lens", None), ("no_reserve_full_isl", False),
          ("async_scheduling", False), ("pad_to", None),
          ("round_stride", False), ("reorder", None), ("prompts", None),
          ("arrivals", None), ("enable_prefix_caching", False),
          ("salt", None), ("lora_ids", None), ("cp_size", None),
          ("cp_rank", None), ("pcp_size", None), ("pcp_rank", None),
          ("interleave", None), ("all_ranks", False), ("cp_convention", None),
          ("model_config", None), ("kv_groups", None),
          ("kernel_block", None), ("mamba_cache_mode", None),
          ("trace", None), ("ms_per_step", None), ("summary", False))


def field_names():
    """The fields of a chunk-cache step, in their default order."""
    return tuple(ffi.string(lib.kv_plan_cc_field_name(k)).decode()
                 for k in range(lib.KV_PLAN_CC_NF))


def _given(v, default):
    """Whether a keyword of plan() holds other than its default."""
    if v is None or isinstance(v, (str, bool, int, float)):
        return v != default
    return True


def check_args(kw, max_tokens, block_size, max_model_len):
    """What argtable refuses before any check: an option of the scheduler's
    plan (kw: plan()'s other keywords), then a missing required one."""
    for name, default in NOT_CC:
        if _given(kw.get(name, default), default):
            usage(PROG, 'invalid option "--%s"' % name.replace("_", "-"))
    for v, opt in ((max_tokens, "--max-tokens=N"),
                   (block_size, "-B|--block-size=N"),
                   (max_model_len, "--max-model-len=M")):
        if v is None:
            usage(PROG, "missing option " + opt)


def _str(v, path=False):
    if v is None:
        return ffi.NULL
    if path:
        v = os.fspath(v)
        if isinstance(v, bytes):
            return ffi.new("char[]", v)
    return ffi.new("char[]", _text(v).encode())


def load(opts, strings):
    """The plan (a struct kv_plan_cc, freed with it) and --steps, after the
    program's checks in its order: the integer options (opts: (option,
    field of struct kv_plan_cc_opts, value, least, most, default); field
    None: --steps), then kv_plan_cc_load's with the string options
    (strings: (field, value))."""
    o = ffi.new("struct kv_plan_cc_opts *")
    k_steps = None
    for opt, attr, v, lo, hi, default in opts:
        v = default if v is None else int_opt(PROG, opt, v, lo, hi)
        if attr is None:
            k_steps = v
        else:
            setattr(o, attr, v)
    keep = []
    for attr, v in strings:
        keep.append(_str(v, path=(attr == "segments")))
        setattr(o, attr, keep[-1])
    pc = ffi.gc(ffi.new("struct kv_plan_cc *"), lib.kv_plan_cc_release)
    e = new_err()
    u = ffi.new("int *")
    if lib.kv_plan_cc_load(pc, o, u, e) != 0:
        (usage if u[0] else fail)(PROG, err_text(e))
    return pc, k_steps


def _value(st, k, i32, name, v):
    """Field k of step st (v: a struct kv_plan_cc_value to fill)."""
    lib.kv_plan_cc_field(st, k, v)
    if v.ndim < 0:                      # the evicted keys: 16 bytes each
        n = v.shape[0]
        return np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", v.keys),
                                        16 * n), np.uint8).reshape(n, 16).copy() \
            if n else np.zeros((0, 16), np.uint8)
    if v.ndim == 0:
        a = np.array(v.scalar, np.int64)
    else:
        shape = tuple(v.shape[d] for d in range(v.ndim))
        n = 1
        for x in shape:
            n *= x
        a = np.frombuffer(ffi.buffer(v.v, 8 * n), np.int64).reshape(shape) \
            .copy() if n else np.zeros(shape, np.int64)
    if i32:
        bad = ((a > I32_MAX) | (a < -2**31)).reshape(-1)
        if bad.any():
            fail(PROG, "--dtype i32: %s holds %d, over 32 bits; use --dtype "
                 "i64" % (name, a.reshape(-1)[int(np.argmax(bad))]))
        a = a.astype(np.int32)
    return a


def _steps(pc, k_steps, decode, i32):
    """Each step's fields as a dict, in the order asked for."""
    names = field_names()
    sel = [pc.sel[i] for i in range(pc.n_sel)] if pc.n_sel else \
        list(range(len(names)))
    e = new_err()
    stp = ffi.new("const struct kv_cc_step **")
    v = ffi.new("struct kv_plan_cc_value *")
    k = 0
    while k_steps is None or k < k_steps:
        got = lib.kv_cc_step(pc.cc, 1 if decode else 0, stp, e)
        if got < 0:
            fail(PROG, err_text(e))
        if got == 0:
            return
        k += 1
        yield {names[j]: _value(stp[0], j, i32, names[j], v) for j in sel}


def plan_cc(kw, segments, output_lens, max_tokens, block_size,
            max_model_len, steps, num_blocks, max_num_seqs, decode,
            chunk_context, chunk_pool_blocks,
            chunk_cache_gpu_memory_utilization, max_chunks,
            max_chunk_tokens, fields, dtype, max_mem):
    """plan(chunk_cache=True, ...): the refusals before any step, then a
    generator of the steps (kw: plan()'s keywords of the scheduler's
    plan, refused unless at their defaults)."""
    check_args(kw, max_tokens, block_size, max_model_len)
    for opt, v in (("--segments", segments), ("--output-lens", output_lens),
                   ("--chunk-context", chunk_context),
                   ("--chunk-cache-gpu-memory-utilization",
                    chunk_cache_gpu_memory_utilization),
                   ("--fields", fields), ("--max-mem", max_mem),
                   ("--dtype", dtype)):
        if v is not None and not isinstance(v, (list, tuple)) and \
                _text(os.fspath(v) if opt == "--segments" else v) == "":
            usage(PROG, "%s: expected a value, got an empty one" % opt)
    if fields is not None and not isinstance(fields, str):
        fields = ",".join(fields)
    pc, k_steps = load((
        ("--max-tokens", "max_tokens", max_tokens, 1, I32_MAX, 0),
        ("-B", "block_size", block_size, 1, I32_MAX, 0),
        ("--max-model-len", "max_model_len", max_model_len, 2, I32_MAX, 0),
        ("--steps", None, steps, 1, I64_MAX, None),
        ("--num-blocks", "num_blocks", num_blocks, 2, I32_MAX, 0),
        ("--max-num-seqs", "max_num_seqs", max_num_seqs, 1, I32_MAX, 256),
        ("--chunk-pool-blocks", "chunk_pool_blocks", chunk_pool_blocks, 1,
         I32_MAX, 0),
        ("--max-chunks", "max_chunks", max_chunks, 1, I32_MAX, 500),
        ("--max-chunk-tokens", "max_chunk_tokens", max_chunk_tokens, 1,
         I32_MAX, 4096)), (
        ("segments", segments), ("output_lens", output_lens),
        ("chunk_context", chunk_context),
        ("utilization", chunk_cache_gpu_memory_utilization),
        ("fields", fields), ("max_mem", max_mem)))
    if dtype in ("i64", "int64", None):
        i32 = False
    elif dtype in ("i32", "int32"):
        i32 = True
    else:
        usage(PROG, "--dtype: expected i64 or i32, got '%s'" % dtype)
    return _steps(pc, k_steps, decode, i32)


# plan()'s keywords of the chunk-cache plan alone, with their defaults
ONLY_CC = (("segments", None), ("chunk_context", None),
           ("chunk_pool_blocks", None),
           ("chunk_cache_gpu_memory_utilization", None),
           ("max_chunks", None), ("max_chunk_tokens", None))


def check_not_cc(kw):
    """Without chunk_cache, an option of the chunk-cache plan is refused as
    the program's scheduler plan refuses it."""
    for name, default in ONLY_CC:
        if _given(kw[name], default):
            usage(PROG, 'invalid option "--%s"' % name.replace("_", "-"))
