"""kvslot-groups.py - 'kvslot groups' and 'kvslot local' against vLLM
0.33.0's own code (scripts/crosscheck/kvslot-groups.sh runs it).

What runs unmodified from the installed release:
  - the KV-cache spec classes and their page sizes
    (vllm.v1.kv_cache_interface: FullAttentionSpec, SlidingWindowSpec,
    ChunkedLocalAttentionSpec, MambaSpec, MLAAttentionSpec,
    UniformTypeKVCacheSpecs);
  - the sliding-window block size (Attention.get_kv_cache_spec's
    _largest_kernel_block_within, vllm/model_executor/layers/attention/
    attention.py);
  - the hybrid Mamba alignment (Platform._align_hybrid_block_size,
    vllm/platforms/interface.py) and the Mamba state shapes and dtypes
    (MambaStateShapeCalculator / MambaStateDtypeCalculator,
    vllm/model_executor/layers/mamba/mamba_utils.py);
  - the grouping (get_kv_cache_groups, vllm/v1/core/kv_cache_planning.py);
  - the local-attention virtual batches (make_local_attention_virtual_batches,
    vllm/v1/attention/backends/utils.py);
  - transformers 5.23.0's config classes, which fill in a config's
    defaults (layer_types of Gemma 3, no_rope_layers of Llama 4...).

What stands in for the rest of an engine (each is infrastructure):
  - the platform: vllm_host's bare Platform reporting "cpu";
  - the attention backend: a class whose only kernel block size is
    MultipleOf(K) (FlashAttention's 16 by default) and whose customize_spec
    returns the spec as it is;
  - the model: vLLM builds each layer's spec from the layer objects of the
    loaded model; here the layer kinds are read from the config with each
    model file's own rule, transcribed and cited in layer_specs() below
    (gemma3.py, gpt_oss.py, llama.py, llama4.py, qwen3_next.py,
    nemotron_h.py, deepseek_v2.py with IndexCache, dots3_note's
    model.py, and the lists MODEL_LEVEL, PER_LAYER, PLUS_ONE, QWEN2_MODEL,
    MLA_TYPES for the other model types), the KV heads and head size by
    vLLM's own ModelArchConfigConvertor, and the model class of
    _align_hybrid_block_size is a stand-in whose state shapes and dtypes
    come from the real calculators with the model file's arguments;
  - the configs around the model: objects with the attributes the functions
    read (VllmConfig would load the model); set_current_vllm_config is a
    no-op context (it only publishes the config to custom ops);
  - pinned memory: off (PIN_MEMORY, a platform probe; no GPU here);
  - the KV-cache layout: LBHNC, a layer-outermost layout, except for
    dots3_note, whose sparse backend supports only BLHNC (vLLM then packs
    the groups, _get_packed_kv_cache_groups).

Modes:
  check KVSLOT CONFIG...      every config at several block sizes, cache
                              dtypes and Mamba cache modes, plus random
                              --kv-groups specs and random local batches;
  golden KVSLOT OUT CONFIG... write vLLM's answer for each config (default
                              options) as OUT/NAME.json, the golden of
                              'kvslot groups --model-config NAME.json -f json'.
Prints one TAP-like line per failure and ends with 'N passed, M failed'.
"""
import contextlib
import json
import os
import random
import subprocess
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_host  # noqa: E402,F401  (before any other vllm module)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import vllm.config.vllm as vllm_config_mod  # noqa: E402
import vllm.utils.torch_utils  # noqa: E402
from vllm.model_executor.layers.attention.attention import (  # noqa: E402
    _largest_kernel_block_within,
)
from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: E402
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models import ModelRegistry  # noqa: E402
from vllm.transformers_utils.model_arch_config_convertor import (  # noqa: E402
    MODEL_ARCH_CONFIG_CONVERTORS,
    ModelArchConfigConvertorBase,
)
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backend import MultipleOf  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    make_local_attention_virtual_batches,
)
from vllm.v1.core.kv_cache_planning import get_kv_cache_groups  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SparseCacheRole,
    UniformTypeKVCacheSpecs,
)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16,
          "float32": torch.float32}
CACHE_DTYPES = {"auto": None, "bfloat16": torch.bfloat16,
                "float16": torch.float16, "float32": torch.float32,
                "fp8": torch.uint8}


@contextlib.contextmanager
def _no_current_config(vllm_config, *args, **kwargs):
    yield


vllm_config_mod.set_current_vllm_config = _no_current_config
# the host has no GPU: host-to-device copies stay unpinned on the CPU
vllm.utils.torch_utils.PIN_MEMORY = False


def backend(kernel):
    class Backend:
        @staticmethod
        def get_supported_kernel_block_sizes(spec=None):
            return [MultipleOf(kernel)]

        @staticmethod
        def customize_spec(spec):
            return spec

        @staticmethod
        def is_ssm():
            return False

        @staticmethod
        def get_name():
            return "STANDIN"

        @staticmethod
        def supports_block_size(b):
            return b % kernel == 0

    return Backend


def text_config(d):
    """transformers' config object of the decoder (defaults filled in);
    vLLM's own config class for a model transformers does not have."""
    if d.get("model_type") == "dots3_note":
        from vllm.transformers_utils.configs.dots3_note import Dots3NoteConfig
        return Dots3NoteConfig(**{k: v for k, v in d.items()
                                  if not k.startswith("_")})
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    if d.get("model_type") in _CONFIG_REGISTRY:
        # a config class vLLM ships (ChatGLM's...)
        cfg = _CONFIG_REGISTRY[d["model_type"]](
            **{k: v for k, v in d.items() if k != "model_type"})
        return cfg.get_text_config()
    try:
        cfg = transformers.AutoConfig.for_model(**d)
    except (ValueError, KeyError):
        return NS(**(d.get("text_config") or d))
    return cfg.get_text_config()


def index_leader(tc, i):
    """deepseek_v2.py, DeepseekV2MLAAttention (IndexCache): whether layer
    i of a model with index_topk keeps its own indexer (and its cache)."""
    pattern = getattr(tc, "index_topk_pattern", None)
    if pattern is None:
        freq = getattr(tc, "index_topk_freq", 1)
        offset = getattr(tc, "index_skip_topk_offset", 2)
        return max(i - offset + 1, 0) % freq == 0
    if 0 <= i < len(pattern):
        return pattern[i] != "S"
    return True


# The model types whose vLLM 0.33.0 model file builds every decoder layer
# as plain attention, transcribed from the files (the rule of each list is
# in layer_specs).  Model files that never pass a per-layer window: every
# layer gets CacheConfig.sliding_window.
MODEL_LEVEL = {"bloom", "cohere", "dbrx", "ernie4_5_moe",
               "falcon", "gemma", "glm4", "glm4_moe", "gpt2", "gptj",
               "hy_v3", "hyperclovax", "mixtral", "nemotron",
               "olmoe", "opt", "stablelm", "qwen2", "qwen3",
               "qwen2_moe", "qwen3_moe", "minicpm3", "bailing_moe", "chatglm",
               "exaone", "internlm2", "minicpm", "orion", "solar",
               "qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text",
               "qwen3_vl_moe_text"}
# Model files that read layer_types per layer (llama.py, and the models
# built on its attention: mistral.py, phi3.py, ernie45.py; apertus.py,
# afmoe.py, exaone4.py, granite.py, laguna.py, beam's attention.py,
# gemma2/3.py, commandr.py, cohere2_moe.py) and the Transformers modeling
# backend (transformers/base.py) that vLLM runs the other types with.
PER_LAYER = {"llama", "mistral", "phi3", "ernie4_5", "internlm3", "iquestcoder", "apertus", "granite",
             "granitemoe", "arcee", "flex_olmo", "gpt_bigcode", "gpt_neox",
             "hunyuan_v1_dense", "hunyuan_v1_moe", "jais2", "seed_oss",
             "starcoder2", "glm", "olmo", "olmo2", "phi", "afmoe", "beam",
             "cwm", "exaone4", "granite_swa", "kolibri1", "laguna", "mellum",
             "olmo3", "smollm3", "vaultgemma", "cohere2", "cohere2_moe",
             "gemma2", "gemma3_text"}
# gated delta net beside attention (qwen3_next.py, qwen3_5.py)
GDN_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
# their model files' head size is hidden_size / heads whatever head_dim says
HEAD_HIDDEN = {"chatglm", "internlm2", "minicpm", "orion"}
# commandr.py / cohere2_moe.py: a sliding layer sees sliding_window + 1 keys
PLUS_ONE = {"cohere2", "cohere2_moe"}
# qwen2.py's Qwen2Model (Qwen2 and Qwen3) asserts against a mix of layer
# types unless max_window_layers is the layer count
QWEN2_MODEL = {"qwen2", "qwen3", "qwen2_vl_text", "qwen2_5_vl_text",
               "qwen3_vl_text"}
# ModelArchConfigConvertor.is_deepseek_mla: one latent a layer
# (deepseek_v2.py's MLA, DeepSeek-V3.2's indexer with index_topk)
MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "axk1",
             "glm4_moe_lite", "glm_moe_dsa"}


def layer_specs(d, opts):
    """[(name, kind, dict)] in layer order, plus the model facts: the layer
    kinds by each vLLM model file's rule."""
    tc = text_config(d)
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    mt = d.get("model_type") if d.get("model_type") in _CONFIG_REGISTRY \
        else getattr(tc, "model_type", d.get("model_type"))
    n = tc.num_hidden_layers
    heads = getattr(tc, "num_attention_heads", 0)
    kv = getattr(tc, "num_key_value_heads", None) or heads
    hd = getattr(tc, "head_dim", None) or tc.hidden_size // heads
    dt_name = d.get("torch_dtype") or d.get("dtype") or \
        getattr(tc, "torch_dtype", None) or getattr(tc, "dtype", None)
    if isinstance(dt_name, torch.dtype):
        mdt = dt_name
    else:
        mdt = DTYPES.get(str(dt_name), torch.bfloat16)
    cdt = CACHE_DTYPES[opts["dtype"]] or mdt
    window = getattr(tc, "sliding_window", None)
    out, use_mla = [], False
    kv_lora = getattr(tc, "kv_lora_rank", None) or 0
    layout = KVCacheLayout.LBHNC
    if mt == "dots3_note":
        # dots3_note/nvidia/model.py: layer_types; a sliding_attention layer
        # is MLAAttention with sliding_window_size (SlidingWindowMLASpec,
        # the swa_ latent), a full_attention layer DeepSeek-V3.2's sparse
        # MLA with its rows padded to the swa_ latent and, where the
        # IndexCache rule keeps it, an indexer; its backend supports only
        # the block-outermost layout BLHNC (model attention.py,
        # Dots3NotePaddedSparseBackend.supported_kv_cache_layouts)
        use_mla = True
        layout = KVCacheLayout.BLHNC
        head = tc.swa_kv_lora_rank + tc.swa_qk_rope_head_dim
        ihd = getattr(tc, "index_head_dim", 128)
        for i in range(n):
            if tc.layer_types[i] == "sliding_attention":
                out.append((f"{i}", "mla_sliding",
                            dict(head=head, dtype=cdt,
                                 window=tc.sliding_window_size)))
                continue
            lead = index_leader(tc, i)
            out.append((f"{i}", "mla", dict(head=head, dtype=cdt, lead=lead,
                                             topk=tc.index_topk)))
            if lead:
                out.append((f"{i}.indexer", "mla_indexer",
                            dict(head=ihd + ihd // 128 * 4, dtype=torch.uint8)))
        kv_lora = 0
    elif kv_lora and mt in MLA_TYPES:
        # deepseek_v2.py / mla_attention.py: the latent, one head; V3.2
        # (index_topk) adds DeepseekV32IndexerCache's fp8 keys and scales
        use_mla = True
        head = kv_lora + tc.qk_rope_head_dim
        idx = getattr(tc, "index_topk", None)
        ihd = getattr(tc, "index_head_dim", 128)
        for i in range(n):
            lead = bool(idx) and index_leader(tc, i)
            out.append((f"{i}", "mla", dict(head=head, dtype=cdt, lead=lead,
                                             topk=idx if idx else None)))
            if lead:
                out.append((f"{i}.indexer", "mla_indexer",
                            dict(head=ihd + ihd // 128 * 4, dtype=torch.uint8)))
    elif mt == "gpt_oss":
        # gpt_oss.py: sliding_window on the even layers
        for i in range(n):
            out.append((f"{i}", "sliding" if i % 2 == 0 else "full",
                        dict(window=window)))
    elif mt in ("llama4", "llama4_text"):
        # llama4.py: chunked local attention where no_rope_layers[i] != 0
        chunk = getattr(tc, "attention_chunk_size", None)
        for i in range(n):
            local = tc.no_rope_layers[i] != 0 and chunk
            out.append((f"{i}", "chunked" if local else "full",
                        dict(chunk=chunk)))
    elif mt in GDN_TYPES:
        # qwen3_next.py, qwen3_5.py: layer_types, linear_attention = gated
        # delta net
        for i in range(n):
            out.append((f"{i}", "mamba" if tc.layer_types[i] ==
                        "linear_attention" else "full", {}))
    elif mt == "nemotron_h":
        # nemotron_h.py: hybrid_override_pattern, M Mamba2, * attention
        for i, c in enumerate(tc.hybrid_override_pattern):
            if c == "M":
                out.append((f"{i}", "mamba", {}))
            elif c == "*":
                out.append((f"{i}", "full", {}))
    elif mt in MODEL_LEVEL or mt in PER_LAYER:
        # ModelConfig's head size and KV heads (the model's convertor:
        # Falcon's multi_query, DBRX's attn_config...)
        conv = MODEL_ARCH_CONFIG_CONVERTORS.get(
            mt, ModelArchConfigConvertorBase)(tc, tc)
        kv, hd = conv.get_total_num_kv_heads(), conv.get_head_size()
        # ... and the model files that count their own
        if mt in HEAD_HIDDEN:
            hd = tc.hidden_size // heads
        if mt == "falcon":          # falcon.py, FalconAttention
            kv = (tc.num_kv_heads if tc.new_decoder_architecture
                  else 1 if tc.multi_query else heads)
        if mt == "chatglm":         # chatglm.py, GLMAttention
            kv = tc.multi_query_group_num if getattr(
                tc, "multi_query_attention", False) else heads
        lt = getattr(tc, "layer_types", None)
        if mt in QWEN2_MODEL and len(set(lt or [])) > 1:
            # qwen2.py, Qwen2Model.__init__
            assert tc.max_window_layers == n, "mixed layer types"
        if mt == "minicpm3":
            # minicpm3.py: Attention over all heads of qk_head_dim values
            kv = heads
            hd = tc.qk_nope_head_dim + tc.qk_rope_head_dim
        # EngineArgs.create_engine_config: CacheConfig.sliding_window only
        # when there are no layer_types or every layer slides
        model_window = window if (lt is None or all(
            t == "sliding_attention" for t in lt)) else None
        for i in range(n):
            per_layer = None
            if mt in PER_LAYER and lt and lt[i] == "sliding_attention":
                per_layer = window + (1 if mt in PLUS_ONE else 0) \
                    if window is not None else None
            # Attention.__init__: the per-layer window, else the model's
            w = per_layer if per_layer is not None else model_window
            out.append((f"{i}", "sliding" if w else "full", dict(window=w)))
    else:
        raise NotImplementedError(f"model_type {mt} is not reviewed")
    facts = NS(model_type=mt, n_layers=n, kv=kv, hd=hd, mdt=mdt, cdt=cdt,
               use_mla=use_mla, tc=tc, layout=layout, head_mla=(kv_lora + getattr(
                   tc, "qk_rope_head_dim", 0)) if kv_lora else 0)
    return out, facts


def mamba_state(facts, opts):
    """The state shapes and dtypes the model class reports."""
    tc = facts.tc
    if facts.model_type in GDN_TYPES:
        # Qwen3NextForCausalLM / Qwen3_5ForCausalLM
        # .get_mamba_state_shape_from_config (tp 1)
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            1, tc.linear_num_key_heads, tc.linear_num_value_heads,
            tc.linear_key_head_dim, tc.linear_value_head_dim,
            tc.linear_conv_kernel_dim, 0)
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            facts.mdt, "auto", "auto")
    elif facts.model_type == "nemotron_h":
        # NemotronHForCausalLM (NemotronHForCausalLMConfig: SSM state in
        # mamba_ssm_cache_dtype, float32 unless the config names one)
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            intermediate_size=tc.mamba_num_heads * tc.mamba_head_dim,
            tp_world_size=1, n_groups=tc.n_groups,
            num_heads=tc.mamba_num_heads, head_dim=tc.mamba_head_dim,
            state_size=tc.ssm_state_size, conv_kernel=tc.conv_kernel)
        dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(
            facts.mdt, "auto",
            getattr(tc, "mamba_ssm_cache_dtype", None) or "float32")
    else:
        shapes, dtypes = ((facts.state_bytes,),), (torch.uint8,)
    return shapes, dtypes


def build(items, facts, opts):
    """vLLM's specs and groups for these layers; returns kvslot's JSON."""
    K = opts["kernel"]
    be = backend(K)
    cache = NS(block_size=opts["block"], cache_dtype="auto",
               mamba_cache_mode=opts["mamba"], mamba_block_size=None,
               mamba_page_size_padded=None, user_specified_block_size=True,
               kv_cache_dtype_skip_layers=None)
    has_mamba = any(k == "mamba" for _, k, _ in items)
    has_attn = any(k != "mamba" for _, k, _ in items)
    max_len = opts["max_model_len"]
    # MambaModelConfig.verify_and_update_config
    if has_mamba:
        cache.mamba_block_size = (cache.block_size if opts["mamba"] == "align"
                                  else max_len)
    if has_mamba and has_attn:
        shapes, dtypes = mamba_state(facts, opts)

        class Model:
            @classmethod
            def get_mamba_state_shape_from_config(cls, vc):
                return shapes

            @classmethod
            def get_mamba_state_dtype_from_config(cls, vc):
                return dtypes

        head = facts.head_mla if facts.use_mla else facts.hd
        mc = NS(use_mla=facts.use_mla, dtype=facts.cdt,
                get_num_kv_heads=lambda pc: 1 if facts.use_mla else facts.kv,
                get_head_size=lambda: head, architecture="Standin")
        vc = NS(cache_config=cache, model_config=mc,
                parallel_config=NS(tensor_parallel_size=1),
                compilation_config=NS(static_forward_context={}))
        old_resolve = ModelRegistry.resolve_model_cls
        old_find = Platform._find_non_ssm_backends
        ModelRegistry.resolve_model_cls = lambda *a, **k: (Model, "Standin")
        Platform._find_non_ssm_backends = classmethod(lambda c, v: [be])
        try:
            Platform._align_hybrid_block_size(vc, be)
        finally:
            ModelRegistry.resolve_model_cls = old_resolve
            Platform._find_non_ssm_backends = old_find
    B = cache.block_size
    specs = {}
    for name, kind, p in items:
        # an explicit spec gives each layer its own size (hd)
        hd = p.get("hd", facts.hd)
        if kind == "full":
            specs[name] = FullAttentionSpec(
                block_size=B, num_kv_heads=facts.kv, head_size=hd,
                dtype=facts.cdt)
        elif kind == "sliding":
            one = SlidingWindowSpec(block_size=1, num_kv_heads=facts.kv,
                                    head_size=hd, dtype=facts.cdt,
                                    sliding_window=p["window"])
            per = one.real_page_size_bytes
            sw = _largest_kernel_block_within(be, per, per * B, B, one)
            specs[name] = SlidingWindowSpec(
                block_size=sw, num_kv_heads=facts.kv, head_size=hd,
                dtype=facts.cdt, sliding_window=p["window"])
        elif kind == "chunked":
            specs[name] = ChunkedLocalAttentionSpec(
                block_size=B, num_kv_heads=facts.kv, head_size=hd,
                dtype=facts.cdt, attention_chunk_size=p["chunk"])
        elif kind == "mla_sliding":
            # mla_attention.py: a latent with a window, on the cache block
            specs[name] = SlidingWindowMLASpec(
                block_size=B, num_kv_heads=1, max_tp_shards=1,
                head_size=p["head"], dtype=p["dtype"],
                sliding_window=p["window"])
        elif kind in ("mla", "mla_indexer"):
            kw = dict(cache_role=SparseCacheRole.INDEXER)
            if kind == "mla":
                # mla_attention.py: the top-k buffer's width and whether
                # the layer leads an index group (has an indexer)
                kw = dict(topk_buffer_width=p.get("topk"),
                          is_index_group_leader=p.get("lead", False))
            specs[name] = MLAAttentionSpec(
                block_size=B, num_kv_heads=1, max_tp_shards=1,
                head_size=p["head"], dtype=p["dtype"], **kw)
        elif kind == "mamba":
            shapes, dtypes = mamba_state(facts, opts)
            specs[name] = MambaSpec(
                shapes=tuple(shapes), dtypes=tuple(dtypes),
                block_size=cache.mamba_block_size,
                page_size_padded=cache.mamba_page_size_padded,
                mamba_cache_mode=opts["mamba"])
    vc = NS(scheduler_config=NS(disable_hybrid_kv_cache_manager=False),
            cache_config=NS(get_resolved_kv_cache_layout=lambda:
                            getattr(facts, "layout", KVCacheLayout.LBHNC)),
            attention_config=NS(hisparse_config=None))
    groups = get_kv_cache_groups(vc, dict(specs))
    return as_json(facts, items, cache, groups)


def kind_of(spec):
    if isinstance(spec, SlidingWindowMLASpec):
        return "mla_sliding_window"
    if isinstance(spec, MLAAttentionSpec):
        return "mla_indexer" if spec.cache_role == SparseCacheRole.INDEXER \
            else "mla"
    if isinstance(spec, FullAttentionSpec):
        return "full"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return "chunked_local"
    if isinstance(spec, MambaSpec):
        return "mamba"
    raise ValueError(f"unexpected spec {type(spec).__name__}")


def as_json(facts, items, cache, groups):
    out = {}
    if facts.model_type:
        out["model_type"] = facts.model_type
    out["num_layers"] = facts.n_layers
    out["num_caches"] = len(items)
    out["block_size"] = cache.block_size
    if cache.mamba_block_size:
        out["mamba_block_size"] = cache.mamba_block_size
        out["mamba_page_size_padded"] = cache.mamba_page_size_padded or 0
    out["num_groups"] = len(groups)
    # vLLM logs the padding layers it adds: the largest group's size less
    # each group's, for grouping by page size (no padding for one group)
    pad = 0
    if len(groups) > 1:
        size = max(len(g.layer_names) for g in groups)
        pad = sum(size - len(g.layer_names) for g in groups)
    out["padding_layers"] = pad
    gl = []
    for g in groups:
        s = g.kv_cache_spec
        uniform = isinstance(s, UniformTypeKVCacheSpecs)
        first = s.first_spec if uniform else s
        x = {"kind": kind_of(first), "uniform_type": uniform}
        if isinstance(first, SlidingWindowSpec):
            x["sliding_window"] = first.sliding_window
        if isinstance(first, ChunkedLocalAttentionSpec):
            x["attention_chunk_size"] = first.attention_chunk_size
        x["block_size"] = s.block_size
        x["page_bytes"] = s.page_size_bytes
        x["layers"] = list(g.layer_names)
        gl.append(x)
    out["groups"] = gl
    return out


def from_config(path, opts):
    with open(path) as f:
        d = json.load(f)
    items, facts = layer_specs(d, opts)
    o = dict(opts)
    if not o.get("max_model_len"):
        o["max_model_len"] = getattr(facts.tc, "max_position_embeddings", 0)
    return build(items, facts, o)


def from_spec(layers, opts):
    """Random explicit specs: (kind, window or bytes per token / state)."""
    items = []
    facts = NS(model_type="", n_layers=len(layers), use_mla=False,
               kv=1, hd=0, mdt=torch.uint8, cdt=torch.uint8, head_mla=0,
               tc=None, state_bytes=0)
    # the model-level attention size: the first attention layer's
    for k, a, t in layers:
        if k not in ("mamba", "indexer") and not facts.hd:
            facts.head_mla = t
            facts.hd = t // 2
        if k in ("mla", "indexer", "mla_sliding"):
            facts.use_mla = True
        if k == "mamba":
            facts.state_bytes = max(facts.state_bytes, a)
    for i, (k, a, t) in enumerate(layers):
        name = f"{i}"
        if k == "full":
            items.append((name, "full", dict(hd=t // 2)))
        elif k == "sliding":
            items.append((name, "sliding", dict(window=a, hd=t // 2)))
        elif k == "chunked":
            items.append((name, "chunked", dict(chunk=a, hd=t // 2)))
        elif k == "mla":
            items.append((name, "mla", dict(head=t, dtype=torch.uint8)))
        elif k == "mla_sliding":
            items.append((name, "mla_sliding",
                          dict(window=a, head=t, dtype=torch.uint8)))
        elif k == "indexer":
            items.append((f"{i}.indexer", "mla_indexer",
                          dict(head=t, dtype=torch.uint8)))
        else:
            items.append((name, "mamba", {}))
    return build(items, facts, opts)


def parse_spec(text):
    """kvslot's --kv-groups grammar (kvslot(1), GROUPS) into the layer
    tuples from_spec takes."""
    pos = 0

    def item():
        nonlocal pos
        times = 1
        j = pos
        while j < len(text) and text[j].isdigit():
            j += 1
        if j > pos and j < len(text) and text[j] == "*":
            times, pos = int(text[pos:j]), j + 1
        if text[pos] == "(":
            pos += 1
            inner = seq()
            assert text[pos] == ")"
            pos += 1
            return inner * times
        j = pos
        while j < len(text) and text[j] not in ",()":
            j += 1
        word, pos = text[pos:j], j
        head, _, tbytes = word.partition(":")
        kind, _, arg = head.partition("=")
        t = int(tbytes) if tbytes else (132 if kind == "indexer" else 4096)
        a = int(arg) if arg else 0
        return [(kind, a, t)] * times

    def seq():
        nonlocal pos
        out = item()
        while pos < len(text) and text[pos] == ",":
            pos += 1
            out += item()
        return out

    return seq()


def spec_string(layers):
    parts = []
    for k, a, t in layers:
        if k == "mamba":
            parts.append(f"mamba={a}")
        elif k in ("full", "mla", "indexer"):
            parts.append(f"{k}:{t}")
        elif k == "sliding":
            parts.append(f"sliding={a}:{t}")
        elif k == "mla_sliding":
            parts.append(f"mla_sliding={a}:{t}")
        else:
            parts.append(f"chunked={a}:{t}")
    return ",".join(parts)


def kvslot(kv, args):
    r = subprocess.run([kv, "groups", *args, "-f", "json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def opt_args(o):
    a = ["-B", str(o["block"]), "--kernel-block", str(o["kernel"]),
         "--mamba-cache-mode", o["mamba"]]
    if o.get("max_model_len"):
        a += ["--max-model-len", str(o["max_model_len"])]
    if o["dtype"] != "auto":
        a += ["--kv-cache-dtype", o["dtype"]]
    return a


def compare(tag, want, got, err, fails):
    if got == want:
        return True
    fails.append(f"not ok - {tag}\n#   vLLM:   {json.dumps(want)}\n"
                 f"#   kvslot: {json.dumps(got) if got else err}")
    return False


def random_layers(rng):
    kinds = rng.choice([["full", "sliding"], ["full", "chunked"],
                        ["full", "mamba"], ["sliding"], ["mla", "mamba"],
                        ["full", "sliding", "mamba"], ["full"], ["mla"],
                        ["sliding", "mamba"], ["sliding", "chunked"],
                        ["full", "sliding", "chunked"], ["chunked", "mamba"],
                        ["full", "chunked", "mamba"], ["mla", "indexer"],
                        ["mla", "indexer", "mamba"], ["mla", "mla_sliding"],
                        ["mla_sliding"], ["mla", "mla_sliding", "mamba"]])
    T = rng.choice([64, 128, 256, 512, 1024, 2048, 4096, 1152, 96, 576 * 2])
    W = rng.choice([4, 16, 128, 512, 1024, 4096])
    pattern = [rng.choice(kinds) for _ in range(rng.randint(1, 6))]
    for k in kinds:
        if k not in pattern:
            pattern.append(k)
    reps = rng.randint(1, 8)
    layers = []
    S = rng.choice([1, 1000, 65536, 1097728, 3 * 2 ** 20, 262144])
    T2 = rng.choice([T, T, T // 2, T * 2, T * 3 // 2])
    for _ in range(reps):
        for j, k in enumerate(pattern):
            t = T2 if k != "mla" and j % 2 else T
            layers.append((k, S if k == "mamba" else W, t))
    # a few extra layers of one kind break the pattern now and then
    if rng.random() < 0.3:
        layers += [layers[rng.randrange(len(layers))]] * rng.randint(1, 3)
    return layers


def random_dots3(rng, path):
    """A random dots3_note-shaped config (layer pattern, window, latents,
    IndexCache rule) at path: vLLM packs its groups (layout BLHNC)."""
    n = rng.randint(2, 24)
    p = rng.choice([0.2, 0.25, 0.5, 0.75])
    d = {"model_type": "dots3_note", "torch_dtype": "bfloat16",
         "hidden_size": 1024, "num_hidden_layers": n,
         "num_attention_heads": 8, "num_key_value_heads": 8,
         "q_lora_rank": 256, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
         "qk_nope_head_dim": 64, "v_head_dim": 64,
         "swa_kv_lora_rank": rng.choice([512, 1024, 1536]),
         "swa_qk_rope_head_dim": rng.choice([64, 128]),
         "sliding_window_size": rng.choice([64, 128, 512, 4096]),
         "index_topk": 256, "index_head_dim": rng.choice([128, 128, 256, 64]),
         "max_position_embeddings": 65536, "vocab_size": 256,
         "layer_types": [rng.choice(["full_attention"] + ["sliding_attention"] *
                                    int(1 / p - 1) or ["full_attention"])
                         for _ in range(n)]}
    r = rng.random()
    if r < 0.3:
        d["index_topk_freq"] = rng.randint(1, 4)
        d["index_skip_topk_offset"] = rng.randint(0, 3)
    elif r < 0.45:
        d["index_topk_pattern"] = "".join(rng.choice("FS") for _ in
                                          range(rng.randint(1, n + 2)))
    with open(path, "w") as f:
        json.dump(d, f)
    return d


# kvslot refuses these by name: vLLM builds caches it does not model
# (Mamba and linear-attention states, KV sharing, compressed, indexed and
# circular-buffer caches, per-layer windows and head sizes, cross
# attention), and a type no one has compared with vLLM's model files
REFUSED = ["falcon_h1", "jamba", "zamba2", "granitemoehybrid", "mamba",
           "mamba2", "kimi_linear", "lfm2",
           "lfm2_moe", "olmo_hybrid", "deepseek_v4", "deepseek_v41",
           "kimi_k3", "step5", "glm5_next", "glm5_next_text", "qwen4_exp",
           "qwen4_exp_text", "minimax_m3", "minimax_m3_vl", "hy_v4",
           "inkling_text", "longcat_flash", "gemma3n_text", "gemma4_text",
           "mimo_v2_flash", "exaone_moe", "step3p5", "minimax_m2",
           "whisper"]
UNREVIEWED = ["gemma3", "qwen3_5", "qwen3_5_moe", "flint", "muse_spark", "granitemoe_swa", "granitemoeshared",
              "sarvam_moe", "step3p7", "plamo3", "rnj1", "pangu_ultra_moe",
              "bailing_hybrid", "nemotron_h_omni", "a_model_from_next_year"]
# transformers fills their layer_types by a rule of the class: without
# them in the config kvslot refuses a model with a window, by name
FILLED = {"afmoe", "beam", "cwm", "exaone4", "granite_swa", "kolibri1",
          "laguna", "mellum", "olmo3", "smollm3", "vaultgemma", "cohere2_moe",
          "qwen2_moe"}


SKIPPED = []


def has_config_class(mt):
    """Whether vLLM reads model type mt through a config class (which
    fills the sizes a config.json lacks), rather than as the bare file."""
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    return mt in _CONFIG_REGISTRY or mt in transformers.CONFIG_MAPPING


def family_configs():
    """[(tag, config, expect)]: minimal configs of every reviewed model
    type (with and without windows, layer types, Qwen's
    use_sliding_window and max_window_layers, MLA sizes and their
    defaults), and of the refused and unreviewed ones.  expect: "derive"
    (kvslot's groups equal vLLM's), "refuse" (kvslot refuses, naming the
    type), "filled" (derive, or refuse for want of layer_types)."""
    base = {"num_hidden_layers": 8, "num_attention_heads": 4,
            "num_key_value_heads": 2, "hidden_size": 256, "head_dim": 64,
            "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
            "vocab_size": 512}
    S, F = "sliding_attention", "full_attention"
    out = []
    for mt in sorted(MODEL_LEVEL | PER_LAYER):
        b = dict(base, model_type=mt)
        if mt == "minicpm3":
            b.update(qk_nope_head_dim=32, qk_rope_head_dim=16,
                     kv_lora_rank=64, q_lora_rank=96, v_head_dim=32)
        ex = "filled" if mt in FILLED else "derive"
        out.append((f"{mt}", b, ex))
        out.append((f"{mt} window", dict(b, sliding_window=64), ex))
        out.append((f"{mt} window=null", dict(b, sliding_window=None), ex))
        out.append((f"{mt} mixed", dict(b, sliding_window=64, layer_types=[
            S, S, F, S, S, S, F, F]), "derive"))
        out.append((f"{mt} all sliding", dict(b, sliding_window=32,
                                              layer_types=[S] * 8), "derive"))
        # no head_dim: the config class's default (a number for some)
        out.append((f"{mt} no head_dim", {k: v for k, v in b.items()
                                          if k != "head_dim"}, ex))
        if mt.startswith("qwen"):
            for mwl in (0, 4, 8):
                out.append((f"{mt} use_sliding_window mwl={mwl}",
                            dict(b, sliding_window=64, use_sliding_window=True,
                                 max_window_layers=mwl), ex))
        if mt == "falcon":
            f = {k: v for k, v in b.items()
                 if k not in ("head_dim", "num_key_value_heads")}
            out[-6:] = []
            out.append(("falcon multi_query", f, "derive"))
            out.append(("falcon num_kv_heads", dict(
                f, new_decoder_architecture=True, num_kv_heads=2), "derive"))
            out.append(("falcon MHA", dict(f, multi_query=False), "derive"))
        if mt == "chatglm":
            out.append(("chatglm multi_query_attention", dict(
                b, multi_query_attention=True, multi_query_group_num=1),
                "derive"))
            out.append(("chatglm num_layers", dict(
                {k: v for k, v in b.items() if k != "num_hidden_layers"},
                num_layers=6, multi_query_attention=False), "derive"))
        if mt == "dbrx":
            out.append(("dbrx kv_n_heads", dict(
                b, attn_config={"kv_n_heads": 2}), "derive"))
            out.append(("dbrx default", {k: v for k, v in b.items()
                                         if k != "num_key_value_heads"},
                        "derive"))
        if mt in ("gemma2", "gemma3_text", "cohere2"):
            out.append((f"{mt} pattern 3", dict(
                b, sliding_window=64, sliding_window_pattern=3), "derive"))
        # sizes the config leaves to its class (Gemma 3's multimodal
        # files give no heads): the class's KV heads, its own number in
        # some classes, the query heads in others; then no size at all
        if has_config_class(mt):
            if mt not in ("falcon", "chatglm", "dbrx"):
                out.append((f"{mt} no KV heads", {
                    k: v for k, v in b.items()
                    if k != "num_key_value_heads"}, ex))
            out.append((f"{mt} class sizes", {
                k: v for k, v in b.items()
                if k not in ("num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "hidden_size",
                             "head_dim")}, ex))
    # glm4_moe_lite's class reads head_dim as qk_rope_head_dim
    out.append(("glm4_moe_lite head_dim", dict(
        base, model_type="glm4_moe_lite", kv_lora_rank=128, head_dim=48,
        qk_rope_head_dim=32, qk_nope_head_dim=64), "derive"))
    # gated delta net beside attention, every full_attention_interval-th
    gdn = dict(base, linear_num_key_heads=2, linear_num_value_heads=4,
               linear_key_head_dim=32, linear_value_head_dim=32,
               linear_conv_kernel_dim=4)
    for mt in sorted(GDN_TYPES):
        out.append((f"{mt} gdn", dict(gdn, model_type=mt), "derive"))
        out.append((f"{mt} gdn interval 2", dict(
            gdn, model_type=mt, full_attention_interval=2), "derive"))
        out.append((f"{mt} gdn layer_types", dict(
            gdn, model_type=mt, layer_types=["linear_attention"] * 5 +
            ["full_attention"] * 3), "derive"))
    out.append(("qwen3_5 text_config", {"model_type": "qwen3_5", "text_config":
                                        dict(gdn, model_type="qwen3_5_text")},
                "derive"))
    # a multimodal config: kvslot reads its text_config (Gemma 3)
    t = dict(base, model_type="gemma3_text", sliding_window=64)
    out.append(("gemma3 text_config", {"model_type": "gemma3",
                                       "text_config": t}, "derive"))
    t = dict(base, model_type="qwen2_5_vl_text", sliding_window=64,
             use_sliding_window=True, max_window_layers=0)
    out.append(("qwen2_5_vl text_config", {"model_type": "qwen2_5_vl",
                                           "text_config": t}, "derive"))
    for mt in sorted(MLA_TYPES):
        b = {k: v for k, v in base.items() if k != "head_dim"}
        b.update(model_type=mt, q_lora_rank=96, qk_nope_head_dim=32,
                 v_head_dim=32)
        out.append((f"{mt} mla", dict(b, kv_lora_rank=128,
                                      qk_rope_head_dim=32), "derive"))
        out.append((f"{mt} mla defaults", b, "derive"))
        out.append((f"{mt} mla IndexCache", dict(
            b, kv_lora_rank=128, qk_rope_head_dim=32, index_topk=64,
            index_topk_freq=2, index_skip_topk_offset=1), "derive"))
    for mt in REFUSED + UNREVIEWED:
        out.append((f"{mt} refused", dict(base, model_type=mt,
                                          sliding_window=64), "refuse"))
    return out


def check_families(kv, fails):
    """family_configs() at a few block sizes and cache dtypes."""
    passed = 0
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                        f"kvslot-groups-family-{os.getpid()}.json")
    for tag, d, expect in family_configs():
        if expect != "refuse":
            try:
                text_config(d)
            except Exception:   # the config class rejects it: not a model
                SKIPPED.append(tag)
                continue
        with open(path, "w") as f:
            json.dump(d, f)
        for block, dtype in ((16, "auto"), (32, "fp8"), (4, "auto")):
            o = dict(block=block, kernel=16, mamba="none", dtype=dtype,
                     max_model_len=0)
            got, err = kvslot(kv, ["--model-config", path, *opt_args(o)])
            named = err is not None and f"model_type '{d['model_type']}'" in err
            if expect == "refuse":
                if got is None and named:
                    passed += 1
                else:
                    fails.append(f"not ok - {tag}: kvslot should refuse it by "
                                 f"name: {err or json.dumps(got)}")
                continue
            try:
                want = from_config(path, o)
            except (AssertionError, AttributeError, TypeError) as ex:
                # vLLM's own code refuses the model (Qwen2Model's assertion,
                # or its max_window_layers missing from the class, or KV
                # heads the class leaves None: Nemotron's, which
                # nemotron.py compares with the TP size)
                if got is None:
                    passed += 1
                else:
                    fails.append(f"not ok - {tag}: vLLM refuses ({ex}), "
                                 "kvslot answers")
                continue
            if (expect == "filled" and got is None and named and
                    "needs 'layer_types'" in err):
                passed += 1
                continue
            passed += compare(f"{tag} {json.dumps(d)} {o}", want, got, err,
                              fails)
    os.unlink(path)
    return passed


def check_local(kv, rng, fails):
    """Random steps through make_local_attention_virtual_batches."""
    C = rng.choice([4, 8, 16, 64])
    B = rng.choice([b for b in (1, 2, 4, 8, 16) if C % b == 0])
    n = rng.randint(1, 5)
    q = [rng.randint(1, 40) for _ in range(n)]
    comp = [rng.randint(0, 60) for _ in range(n)]
    seq = [a + b for a, b in zip(q, comp)]
    cols = max((s + B - 1) // B for s in seq) + rng.randint(0, 3)
    table = [[rng.randint(1, 999) for _ in range((s + B - 1) // B)]
             for s in seq]
    full = np.zeros((n, cols), dtype=np.int32)
    for r, row in enumerate(table):
        full[r, :len(row)] = row
    qsl = torch.tensor(np.concatenate([[0], np.cumsum(q)]), dtype=torch.int32)
    cm = NS(query_start_loc_cpu=qsl, query_start_loc=qsl,
            seq_lens=torch.tensor(seq, dtype=torch.int32),
            block_table_tensor=torch.from_numpy(full),
            num_actual_tokens=int(sum(q)), slot_mapping=None)
    meta, _ = make_local_attention_virtual_batches(C, cm, B)
    want = {
        "query_start_loc": meta.query_start_loc_cpu.tolist(),
        "seq_lens": meta.seq_lens.tolist(),
        "block_table": meta.block_table_tensor.tolist(),
        "max_query_len": int(meta.max_query_len),
        "max_seq_len": int(meta.max_seq_len),
    }
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                        f"kvslot-groups-bt-{os.getpid()}.txt")
    with open(path, "w") as f:
        for row in full.tolist():     # the tensor, zero-filled
            f.write(" ".join(map(str, row)) + "\n")
    r = subprocess.run([kv, "local", "--chunk-size", str(C), "-B", str(B),
                        "--block-table", path, "--scheduled",
                        ",".join(map(str, q)), "--computed",
                        ",".join(map(str, comp)), "-f", "text"],
                       capture_output=True, text=True)
    os.unlink(path)
    got = {"block_table": []}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(":")
        vals = [int(x) for x in v.split()]
        if k == "block_table":
            got["block_table"].append(vals)
        elif k in ("max_query_len", "max_seq_len"):
            got[k] = vals[0]
        elif k in want:
            got[k] = vals
    return compare(f"local C={C} B={B} q={q} computed={comp}", want, got,
                   r.stderr, fails)


def main():
    mode, kv = sys.argv[1], sys.argv[2]
    passed, fails = 0, []
    if mode == "golden":
        outdir, configs = sys.argv[3], sys.argv[4:]
        base = dict(block=16, kernel=16, mamba="none", dtype="auto",
                    max_model_len=0)
        for c in configs:
            name = os.path.splitext(os.path.basename(c))[0]
            want = from_config(c, base)
            with open(os.path.join(outdir, name + ".json"), "w") as f:
                f.write(json.dumps(want, separators=(",", ":")) + "\n")
        return 0
    if mode == "golden-spec":
        # entries NAME|SPEC|OPTIONS (OPTIONS: kvslot's, space-separated)
        outdir = sys.argv[3]
        for entry in sys.argv[4:]:
            name, spec, args = entry.split("|")
            o = dict(block=16, kernel=16, mamba="none", dtype="auto",
                     max_model_len=0)
            a = args.split()
            for k, v in zip(a[::2], a[1::2]):
                key = {"-B": "block", "--kernel-block": "kernel",
                       "--mamba-cache-mode": "mamba",
                       "--max-model-len": "max_model_len"}[k]
                o[key] = v if key == "mamba" else int(v)
            want = from_spec(parse_spec(spec), o)
            with open(os.path.join(outdir, name + ".json"), "w") as f:
                f.write(json.dumps(want, separators=(",", ":")) + "\n")
        return 0
    configs = sys.argv[3:]
    seed = int(os.environ.get("KVX_SEED", "20"))
    rng = random.Random(seed)
    for c in configs:
        for block in (16, 32, 64, 4):
            for mamba in ("none", "align"):
                for dtype in ("auto", "fp8"):
                    o = dict(block=block, kernel=16, mamba=mamba, dtype=dtype,
                             max_model_len=0)
                    want = from_config(c, o)
                    got, err = kvslot(kv, ["--model-config", c, *opt_args(o)])
                    passed += compare(f"{os.path.basename(c)} {o}", want, got,
                                      err, fails)
    passed += check_families(kv, fails)
    for _ in range(int(os.environ.get("KVX_GROUP_CASES", "3000"))):
        layers = random_layers(rng)
        o = dict(block=rng.choice([4, 16, 32, 48, 64, 128]),
                 kernel=rng.choice([16, 16, 32, 64, 1]),
                 mamba=rng.choice(["none", "align"]), dtype="auto",
                 max_model_len=rng.choice([4096, 131072, 262144]))
        try:
            want = from_spec(layers, o)
        except (NotImplementedError, AssertionError, ValueError) as ex:
            want = None
            refused = f"{type(ex).__name__}: {ex}"
        spec = spec_string(layers)
        got, err = kvslot(kv, ["--kv-groups", spec, *opt_args(o)])
        if want is None:
            if got is None:
                passed += 1
            else:
                fails.append(f"not ok - --kv-groups {spec} {o}: vLLM refuses "
                             f"({refused}), kvslot answers")
            continue
        if got is not None:
            got.pop("model_type", None)
        passed += compare(f"--kv-groups {spec} {o}", want, got, err, fails)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                        f"kvslot-groups-dots3-{os.getpid()}.json")
    for _ in range(int(os.environ.get("KVX_DOTS3_CASES", "500"))):
        d = random_dots3(rng, path)
        o = dict(block=rng.choice([4, 16, 32, 64]), kernel=16, mamba="none",
                 dtype=rng.choice(["auto", "fp8"]), max_model_len=0)
        want = from_config(path, o)
        got, err = kvslot(kv, ["--model-config", path, *opt_args(o)])
        passed += compare(f"dots3_note {json.dumps(d)} {o}", want, got, err,
                          fails)
    if os.path.exists(path):
        os.unlink(path)
    for _ in range(int(os.environ.get("KVX_LOCAL_CASES", "2000"))):
        passed += check_local(kv, rng, fails)
    for f in fails[:int(os.environ.get("KVX_SHOW", "20"))]:
        print(f)
    if SKIPPED:
        print(f"# {len(SKIPPED)} configs the config class rejects, not run: "
              + "; ".join(SKIPPED))
    print(f"{passed} passed, {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
