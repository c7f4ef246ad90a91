"""kvslot groups in-process: the KV-cache groups, page sizes and block
sizes vLLM derives for a model (libkv's kv_groups_load), as the dict
kvslot groups -f json prints."""
import os

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text

PROG = "kvslot groups"

# --kv-cache-dtype: bytes per value, 0 for auto (the model's dtype)
_CACHE_DTYPE = {"auto": 0, "bfloat16": 2, "bf16": 2, "float16": 2, "f16": 2,
                "float32": 4, "f32": 4, "fp8": 1, "fp8_e4m3": 1,
                "fp8_e5m2": 1}


def _cache_name(g, i):
    """The layer a cache belongs to, "7" or "7.indexer"."""
    s = g.spec[i]
    kind = ffi.string(lib.kv_cache_kind_name(s.kind)).decode()
    return "%d%s" % (s.layer, ".indexer" if kind == "mla_indexer" else "")


def _as_dict(g):
    d = {}
    mt = ffi.string(g.model_type).decode("utf-8", "replace")
    if mt:
        d["model_type"] = mt
    d["num_layers"] = g.n_layers
    d["num_caches"] = g.n_specs
    d["block_size"] = g.block_size
    if g.mamba_block_size:
        d["mamba_block_size"] = g.mamba_block_size
        d["mamba_page_size_padded"] = g.mamba_page_padded
    d["num_groups"] = g.n_groups
    d["padding_layers"] = g.padding_layers
    groups = []
    for i in range(g.n_groups):
        gr = g.group[i]
        kind = ffi.string(lib.kv_cache_kind_name(gr.kind)).decode()
        x = {"kind": kind, "uniform_type": bool(gr.uniform_type)}
        if kind in ("sliding_window", "mla_sliding_window"):
            x["sliding_window"] = gr.window
        if kind == "chunked_local":
            x["attention_chunk_size"] = gr.window
        x["block_size"] = gr.block_size
        x["page_bytes"] = gr.page_bytes
        x["layers"] = [_cache_name(g, gr.specs[k]) for k in range(gr.n_specs)]
        groups.append(x)
    d["groups"] = groups
    return d


def groups(model_config=None, kv_groups=None, block_size=16, kernel_block=16,
           max_model_len=None, kv_cache_dtype="auto", mamba_cache_mode="none"):
    """kvslot groups: model_config (a config.json path) or kv_groups (the
    layers spelled out, kvslot(1) GROUPS); returns the dict kvslot groups
    -f json prints (groups: a list of dicts, one per KV-cache group)."""
    if (model_config is None) == (kv_groups is None):
        usage(PROG, "give either --model-config FILE or --kv-groups SPEC")
    o = ffi.new("struct kv_groups_opts *")
    o.block_size = int_opt(PROG, "--block-size", block_size, 1, 1 << 20)
    o.kernel_block = int_opt(PROG, "--kernel-block", kernel_block, 1, 1 << 20)
    if max_model_len is not None:
        o.max_model_len = int_opt(PROG, "--max-model-len", max_model_len, 1,
                                  1 << 40)
    dt = _text(kv_cache_dtype)
    if dt not in _CACHE_DTYPE:
        usage(PROG, "--kv-cache-dtype: unknown dtype '%s' (auto, bfloat16, "
              "float16, float32, fp8)" % dt)
    o.cache_dtype_bytes = _CACHE_DTYPE[dt]
    mm = _text(mamba_cache_mode)
    if mm not in ("none", "align"):
        usage(PROG, "--mamba-cache-mode: expected none or align, got '%s'"
              % mm)
    o.mamba_align = mm == "align"
    mc = ffi.NULL if model_config is None else \
        ffi.new("char[]", os.fsencode(model_config))
    spec = ffi.NULL if kv_groups is None else \
        ffi.new("char[]", _text(kv_groups).encode())
    g = ffi.new("struct kv_groups *")
    e = new_err()
    use = ffi.new("int *")
    lib.kv_groups_init(g)
    try:
        if lib.kv_groups_load(g, mc, spec, o, use, e) != 0:
            if use[0]:
                usage(PROG, err_text(e))
            fail(PROG, err_text(e))
        return _as_dict(g)
    finally:
        lib.kv_groups_release(g)
