"""kvslot plan with KV-cache groups against vLLM's own scheduler and
HybridKVCacheCoordinator (scripts/crosscheck/kvslot-hybrid.sh).

The engine stand-ins are vllm_plan.py's (its synchronous and asynchronous
engine loops, model runner, platform, model config and KV-event recorder);
this file changes only the KV cache config: the groups 'kvslot groups'
derives from a --kv-groups spec, each a FullAttentionSpec,
SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec,
SlidingWindowMLASpec or MambaSpec (cache mode
"none", without prefix caching, as vLLM requires) of the group's block
size and window, one shared pool of num_blocks blocks, the engine's default
prefix_cache_retention_interval (0), and the scheduler and hash block
sizes from vLLM's resolve_kv_cache_block_sizes.  The packed mixes
(PACKED) build the config as vLLM's engine does instead, from per-layer
specs in the block-outermost layout (packed_kv_cache_config), and check
that its groups hold the layers 'kvslot groups' packs; with Mamba layers
(mamba-packed, mamba-align-packed: vLLM packs them, nothing refuses
them) the specs are built on the block and padded state page vLLM's own
Platform._align_hybrid_block_size gives (hybrid_alignment).  Each step
compares the scheduled requests and tokens, computed and cached tokens,
every group's block table, the waiting queue, preemptions, finishes,
free, shared and evicted blocks.

usage: python kvslot-hybrid.py KVSLOT [--traces N] [--seed S] [--jobs J]
       python kvslot-hybrid.py KVSLOT --one SEED:INDEX:MIX:CONFIG
"""
import argparse
import contextlib
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_plan as vp  # noqa: E402  (imports vllm_host first)

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import CacheConfig, KVEventsConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.model_executor.layers.attention.attention import (  # noqa: E402
    _largest_kernel_block_within)
from vllm.model_executor.models import ModelRegistry  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backend import MultipleOf  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes)
from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    DefaultKVCacheConfigBuilder, get_kv_cache_groups_from_builder)
from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    ChunkedLocalAttentionSpec, FullAttentionSpec, KVCacheConfig,
    KVCacheGroupSpec, MambaSpec, MLAAttentionSpec, SlidingWindowMLASpec,
    SlidingWindowSpec, SparseCacheRole)
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

MIXES = ("full+sliding", "sliding-only", "full+chunked", "full+mamba",
         "mla+sliding", "mixed-blocks", "full+mamba-align", "mamba-align-mixed",
         "mla+sliding-packed", "mamba-packed", "mamba-align-packed")
# mixes whose groups vLLM builds itself, through the packed grouping of a
# block-outermost layout, from per-layer specs
PACKED = ("mla+sliding-packed", "mamba-packed", "mamba-align-packed")
RECYCLING = ("sliding_window", "mla_sliding_window", "chunked_local")
CONFIGS = ("apc", "apc-noreserve", "plain", "plain-noreserve",
           "apc-async", "apc-noreserve-async", "plain-async", "plain-noreserve-async")
KVSLOT = None


def mamba_mode(mix):
    """The Mamba cache mode of a mix: align (what vLLM's engine picks with
    prefix caching; its Scheduler runs it without too) or none."""
    return "align" if mix in ("full+mamba-align", "mamba-align-mixed",
                              "mamba-align-packed") else "none"


def spec_for(t, rng):
    """A --kv-groups spec of the trace's mix."""
    bs, mix = t["bs"], t["mix"]
    w = lambda: rng.choice((2, 3, bs, bs + 1, 2 * bs, rng.randint(2, 3 * bs + 3)))  # noqa: E731
    if mix in PACKED:
        t["layers"], spec = (mamba_packed_model(rng, w, bs) if "mamba" in mix
                             else packed_model(rng, w))
        return spec
    if mix == "full+sliding":
        return rng.choice(("sliding=%d,full" % w(), "full,sliding=%d" % w(),
                           "2*(5*sliding=%d,full)" % w(),
                           "sliding=%d,sliding=%d,full" % (w(), w()),
                           "3*sliding=%d,full" % w()))
    if mix == "mixed-blocks":
        # pages of 2,048 or 1,024 bytes a token beside 4,096: vLLM grows
        # those groups' blocks to 2 or 4 times the others'
        tb = lambda: rng.choice((2048, 1024))  # noqa: E731
        c = bs * rng.randint(1, 4)
        return rng.choice(("sliding=%d:%d,full" % (w(), tb()),
                           "full:%d,sliding=%d" % (tb(), w()),
                           "2*(5*sliding=%d:%d,full)" % (w(), tb()),
                           "sliding=%d,sliding=%d:%d,full" % (w(), w(), tb()),
                           "chunked=%d:%d,full" % (c, tb()),
                           "full:%d,chunked=%d" % (tb(), c),
                           "full:%d,full" % tb(),
                           # no group of the block: a hash block of twice it
                           "full:2048,sliding=%d:1024" % w(),
                           "sliding=%d:2048,full:1024" % w(),
                           "mla:2048,mla_sliding=%d:1024" % w()))
    if mix == "mla+sliding":
        return rng.choice(("mla_sliding=%d,mla" % w(), "mla,mla_sliding=%d" % w(),
                           "2*(5*mla_sliding=%d,mla)" % w(),
                           "mla_sliding=%d,mla_sliding=%d,mla" % (w(), w()),
                           "3*mla_sliding=%d,mla" % w()))
    if mix == "sliding-only":
        return rng.choice(("sliding=%d" % w(), "2*sliding=%d" % w(),
                           "sliding=%d,sliding=%d" % (w(), w())))
    if mix == "full+mamba-align":
        # Mamba cache mode align: every group in blocks of bs
        s = 2048 * bs
        return rng.choice(("mamba=%d,full" % s, "3*mamba=%d,full" % s,
                           "full,mamba=%d" % s, "2*(3*mamba=%d,full)" % s,
                           "mamba=%d,sliding=%d,full" % (s, w()),
                           "full,mamba=%d,chunked=%d" % (s, bs * rng.randint(1, 4))))
    if mix == "mamba-align-mixed":
        # Mamba in cache mode align beside attention groups of different
        # block sizes: pages of 2,048 or 1,024 bytes a token beside 4,096
        # grow those groups' blocks to 2 or 4 times the Mamba block
        s = 2048 * bs
        tb = lambda: rng.choice((2048, 1024))  # noqa: E731
        return rng.choice(("mamba=%d,full:%d,full" % (s, tb()),
                           "full,mamba=%d,full:%d" % (s, tb()),
                           "2*(mamba=%d,full:%d,full)" % (s, tb()),
                           "mamba=%d,sliding=%d:%d,full" % (s, w(), tb()),
                           "full:%d,mamba=%d,sliding=%d" % (tb(), s, w()),
                           "mamba=%d,full,chunked=%d:%d" % (s, bs * rng.randint(1, 4) * 4, tb())))
    if mix == "full+mamba":
        s = 2048 * bs
        return rng.choice(("mamba=%d,full" % s, "3*mamba=%d,full" % s,
                           "full,mamba=%d" % s, "2*(3*mamba=%d,full)" % s))
    c = bs * rng.randint(1, 4)
    return rng.choice(("chunked=%d,full" % c, "full,chunked=%d" % c,
                       "3*(3*chunked=%d,full)" % c))


def packed_model(rng, w):
    """A model vLLM groups by packing (a block-outermost layout and layers
    of several page sizes): [(kind, bytes a token, window, leads an index
    group)] in vLLM's layer order, and the --kv-groups spec that spells
    it.  Mostly dots3_note's shape: N repeats of a pattern of sparse MLA
    layers (the latent, padded to the sliding layers' or not, and
    DeepSeek-V3.2's indexer before or after it, on every such layer or
    under an IndexCache rule) and sliding-window MLA layers, one window or
    two; else standard full, sliding and chunked layers of different
    bytes a token."""
    reps = rng.randint(1, 3)
    if rng.random() < 0.8:
        pat = ""
        while "f" not in pat or ("s" not in pat and rng.random() < 0.9):
            pat = "".join(rng.choice("fss") for _ in range(rng.randint(1, 5)))
        t_sw = 2 * rng.choice((1088, 576, 96, 40))
        t_mla = t_sw if rng.random() < 0.6 else 2 * rng.choice((576, 64, 1088, 24))
        t_idx = rng.choice((132, 132, 132, 68))
        wins = [w(), w()] if rng.random() < 0.15 else [w()]
        first = rng.random() < 0.5            # the indexer before its latent
        rule = rng.choice(("all", "all", "freq2", "freq3", "random"))
        layers = []
        for r in range(reps):
            for j, c in enumerate(pat):
                i = r * len(pat) + j
                if c == "s":
                    layers.append(("mla_sliding", t_sw, wins[j % len(wins)], False))
                    continue
                lead = (rule == "all" or (rule == "random" and rng.random() < 0.6) or
                        (rule.startswith("freq") and max(i - 1, 0) % int(rule[-1]) == 0))
                mla = [("mla", t_mla, None, lead)]
                idx = [("indexer", t_idx, None, False)] if lead else []
                layers += idx + mla if first else mla + idx
    else:
        kinds = ["full", "sliding", "chunked"]
        tb = {k: rng.choice((4096, 2048, 1024)) for k in kinds}
        win = {"sliding": w(), "chunked": rng.choice((1, 2, 4)) * 16}
        pat = []
        while len({k for k, _ in pat}) < 2:
            pat = [(k, tb[k] if rng.random() < 0.8 else 512)
                   for k in rng.choices(kinds, weights=(3, 3, 1), k=rng.randint(2, 5))]
        layers = [(k, b, win.get(k), False) for _ in range(reps) for k, b in pat]
    return layers, "packed:" + spell(layers, reps)


def mamba_packed_model(rng, w, bs):
    """A packed model with Mamba layers (packed_model's form): N repeats
    of a pattern of Mamba layers of one state size beside attention
    layers of several bytes a token (full, sliding, chunked), or beside
    MLA layers (the latent, DeepSeek-V3.2's indexer on some,
    sliding-window MLA), one trace in four.  The state is the page of bs
    tokens at 2,048 or 4,096 bytes, three times the latter (the
    attention block grows), or any size up to five times it (padded)."""
    reps = rng.randint(1, 3)
    state = rng.choice((2048 * bs, 4096 * bs, 3 * 4096 * bs,
                        rng.randint(1, 5 * 4096 * bs)))
    mla = rng.random() < 0.25
    kinds = (["mla", "mla_sliding"] if mla else ["full", "sliding", "chunked"])
    tb = {k: rng.choice((4096, 2048, 1024)) for k in kinds}
    if mla:
        tb = {k: 2 * rng.choice((1088, 576, 96)) for k in kinds}
    win = {"sliding": w(), "mla_sliding": w(), "chunked": rng.choice((1, 2, 4)) * 16}
    pat = []
    while "mamba" not in [k for k, _ in pat] or len({k for k, _ in pat}) < 2:
        pat = [("mamba", state) if rng.random() < 0.35 else
               (k, tb[k] if rng.random() < 0.7 else rng.choice((512, 4096, 2176)))
               for k in rng.choices(kinds, weights=(3, 2, 1)[:len(kinds)],
                                    k=rng.randint(2, 6))]
    lead = mla and rng.random() < 0.5
    layers = []
    for _ in range(reps):
        for k, b in pat:
            if k == "mla" and lead:
                layers += [("mla", b, None, True), ("indexer", 132, None, False)]
            else:
                layers.append((k, b, win.get(k), False))
    return layers, "packed:" + spell(layers, reps)


def spell(layers, reps):
    """The spec items of layers, repeated runs as K*item, the pattern as
    N*(...) when each of the reps repeats is the same."""
    def item(x):
        k, b, win, _ = x
        if k == "mamba":
            return "mamba=%d" % b
        name = {"mla_sliding": "mla_sliding=%d", "sliding": "sliding=%d",
                "chunked": "chunked=%d"}.get(k, k)
        name = name % win if "%" in name else name
        return "%s:%d" % (name, b)

    def runs(items):
        out = []
        for x in items:
            if out and out[-1][1] == x:
                out[-1][0] += 1
            else:
                out.append([1, x])
        return ",".join(x if n == 1 else "%d*%s" % (n, x) for n, x in out)

    items = [item(x) for x in layers]
    n = len(items) // reps
    if reps > 1 and n * reps == len(items) and \
            all(items[k * n:(k + 1) * n] == items[:n] for k in range(reps)):
        return "%d*(%s)" % (reps, runs(items[:n]))
    return runs(items)


def packed_specs(t):
    """vLLM's per-layer specs of the trace's packed model, named as 'kvslot
    groups' names its layers (an indexer 'N.indexer'): mla_attention.py's
    MLAAttentionSpec of a latent (is_index_group_leader when it has an
    indexer) and SlidingWindowMLASpec of a sliding layer,
    DeepseekV32IndexerCache's MLAAttentionSpec (cache role INDEXER, fp8
    bytes), Attention's FullAttentionSpec, SlidingWindowSpec (its block
    from _largest_kernel_block_within), ChunkedLocalAttentionSpec, and
    MambaBase's MambaSpec (a state of bytes, the cache config's Mamba block
    and padded page), on the block hybrid_alignment gives a model with
    Mamba layers."""
    bs, specs = t["bs"], {}
    cache = hybrid_alignment(t)
    if cache is not None:
        bs = cache.block_size
    for i, (k, b, win, lead) in enumerate(t["layers"]):
        kw = dict(block_size=bs, num_kv_heads=1)
        name = "layer.%d" % i
        if k == "mamba":
            specs[name] = MambaSpec(shapes=((b,),), dtypes=(torch.uint8,),
                                    block_size=cache.mamba_block_size,
                                    page_size_padded=cache.mamba_page_size_padded,
                                    mamba_cache_mode=cache.mamba_cache_mode)
        elif k == "indexer":
            specs[name + ".indexer"] = MLAAttentionSpec(
                max_tp_shards=1, head_size=b, dtype=torch.uint8,
                cache_role=SparseCacheRole.INDEXER, **kw)
        elif k == "mla":
            specs[name] = MLAAttentionSpec(max_tp_shards=1, head_size=b // 2,
                                           dtype=torch.bfloat16,
                                           is_index_group_leader=lead, **kw)
        elif k == "mla_sliding":
            specs[name] = SlidingWindowMLASpec(max_tp_shards=1, head_size=b // 2,
                                               dtype=torch.bfloat16,
                                               sliding_window=win, **kw)
        elif k == "sliding":
            one = SlidingWindowSpec(block_size=1, num_kv_heads=1, head_size=b // 4,
                                    dtype=torch.float16, sliding_window=win)
            per = one.real_page_size_bytes
            kw["block_size"] = _largest_kernel_block_within(
                kernel_backend(t["bs"]), per, per * bs, bs, one)
            specs[name] = SlidingWindowSpec(head_size=b // 4, dtype=torch.float16,
                                            sliding_window=win, **kw)
        elif k == "chunked":
            specs[name] = ChunkedLocalAttentionSpec(head_size=b // 4, dtype=torch.float16,
                                                    attention_chunk_size=win, **kw)
        else:
            specs[name] = FullAttentionSpec(head_size=b // 4, dtype=torch.float16, **kw)
    return specs


def kernel_backend(kernel):
    """An attention backend whose only kernel block size is MultipleOf(kernel)
    ('kvslot groups --kernel-block'), its specs as they are."""
    class Backend:
        @staticmethod
        def get_supported_kernel_block_sizes(spec=None):
            return [MultipleOf(kernel)]

        @staticmethod
        def customize_spec(spec):
            return spec
    return Backend


@functools.lru_cache(maxsize=64)
def _hybrid_alignment(layers, bs, mml, mode):
    from types import SimpleNamespace as NS
    import vllm.config.vllm as vcm
    state = [b for k, b, _, _ in layers if k == "mamba"]
    attn = [(k, b) for k, b, _, _ in layers if k not in ("mamba", "indexer")]
    if not state or not attn:
        return None
    use_mla = attn[0][0].startswith("mla")
    cache = NS(block_size=bs, cache_dtype="auto", mamba_cache_mode=mode,
               mamba_block_size=bs if mode == "align" else mml,
               mamba_page_size_padded=None, user_specified_block_size=True,
               kv_cache_dtype_skip_layers=None)

    class Model:
        @classmethod
        def get_mamba_state_shape_from_config(cls, vc):
            return ((state[0],),)

        @classmethod
        def get_mamba_state_dtype_from_config(cls, vc):
            return (torch.uint8,)

    be = kernel_backend(bs)
    head = attn[0][1] // 2 if use_mla else attn[0][1] // 4
    mc = NS(use_mla=use_mla, dtype=torch.bfloat16 if use_mla else torch.float16,
            get_num_kv_heads=lambda pc: 1, get_head_size=lambda: head,
            architecture="Standin")
    vc = NS(cache_config=cache, model_config=mc,
            parallel_config=NS(tensor_parallel_size=1),
            compilation_config=NS(static_forward_context={}))
    saved = (ModelRegistry.resolve_model_cls, Platform._find_non_ssm_backends,
             vcm.set_current_vllm_config)
    ModelRegistry.resolve_model_cls = lambda *a, **k: (Model, "Standin")
    Platform._find_non_ssm_backends = classmethod(lambda c, v: [be])
    vcm.set_current_vllm_config = lambda *a, **k: contextlib.nullcontext()
    try:
        Platform._align_hybrid_block_size(vc, be)
    finally:
        (ModelRegistry.resolve_model_cls, Platform._find_non_ssm_backends,
         vcm.set_current_vllm_config) = saved
    return cache


def hybrid_alignment(t):
    """The cache config of the trace's packed model after vLLM's hybrid
    alignment, None without Mamba layers: MambaModelConfig's Mamba block
    (the model length in cache mode none, the cache block in align), then
    Platform._align_hybrid_block_size run as the engine runs it, the
    attention block grown until its page holds the state and the Mamba
    page padded to it.  Stand-ins: the model class reports the state (one
    array of its bytes); the model-level attention is the first attention
    layer's, MLA when it is (its block a multiple of 128); the attention
    backend's kernel block is MultipleOf(bs)."""
    return _hybrid_alignment(tuple(t["layers"]), t["bs"], t["mml"],
                             mamba_mode(t["mix"]))


class VllmCannotBuild(Exception):
    """vLLM fails building the KV cache config of the trace's model."""


def packed_kv_cache_config(t, retention):
    """The scheduler's KVCacheConfig of the trace's packed model, built as
    vLLM's engine builds it: its default builder's grouping checked for an
    exact partition (get_kv_cache_groups_from_builder: get_kv_cache_groups
    in the block-outermost layout BLHNC, _get_packed_kv_cache_groups), the
    builder's get_kv_cache_config_from_groups for the pool's blocks (as
    num_gpu_blocks_override gives them), then
    generate_scheduler_kv_cache_config (each group's first layer spec
    stands for it).  Sets t["vllm_groups"], each group's layer names;
    raises VllmCannotBuild where vLLM fails."""
    from types import SimpleNamespace as NS
    vc = NS(scheduler_config=NS(disable_hybrid_kv_cache_manager=False),
            cache_config=NS(get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC,
                            num_gpu_blocks_override=t["num_blocks"],
                            prefix_cache_retention_interval=retention),
            model_config=NS(supports_kv_cache_grouping=False),
            attention_config=NS(hisparse_config=None))
    builder = DefaultKVCacheConfigBuilder()
    try:
        groups = get_kv_cache_groups_from_builder(builder, vc, packed_specs(t))
    except (StopIteration, AssertionError) as e:
        raise VllmCannotBuild(repr(e)) from None
    worker = builder.get_kv_cache_config_from_groups(vc, groups, t["num_blocks"])
    assert worker.num_blocks == t["num_blocks"]
    t["vllm_groups"] = [list(g.layer_names) for g in groups]
    return generate_scheduler_kv_cache_config([worker])


def kvslot_groups(spec, bs, mml, mode="none", refusable=False):
    """kvslot's groups of spec; None where it refuses a refusable spec."""
    p = subprocess.run([KVSLOT, "groups", "--kv-groups", spec, "-B", str(bs),
                        "--kernel-block", str(bs), "--max-model-len", str(mml),
                        "--mamba-cache-mode", mode, "-f", "json"],
                       capture_output=True, text=True, check=not refusable)
    return json.loads(p.stdout)["groups"] if p.returncode == 0 else None


def group_need(t, g, maxc, asynch):
    """Blocks group g holds at most for maxc tokens (kvslot plan's check)."""
    bs = g["block_size"]
    one = -(-maxc // bs)
    fl = t["budget"] * (2 if asynch else 1)
    if g["kind"] in ("sliding_window", "mla_sliding_window"):
        x = min(g["sliding_window"] - 1 + fl, t["mml"])
        return min(one, -(-x // bs) + 1)
    if g["kind"] == "chunked_local":
        x = min(g["attention_chunk_size"] + fl, t["mml"])
        return min(one, -(-x // bs))
    if g["kind"] == "mamba":
        return -(-maxc // g["block_size"])
    return one


def longer_prompts(t, rng):
    """Prompts long enough for hits at the LCM of the groups' blocks: a
    model length of 2 to 6 LCMs, prompts sharing prefixes of whole hash
    blocks or LCMs with a few bases, some sent twice (a Mamba group in
    cache mode none, whose block is the model length, left out of the
    LCM)."""
    lcm = functools.reduce(math.lcm, [g["block_size"] for g in t["groups"]
                                      if g["kind"] != "mamba" or
                                      mamba_mode(t["mix"]) == "align"])
    hbs, n = t["hbs"], len(t["prompts"])
    mml = max(t["mml"], lcm * rng.randint(2, 6) + rng.randint(0, lcm - 1))
    bases = [[rng.randint(1, 40) for _ in range(mml)] for _ in range(rng.randint(1, 2))]
    prompts = []
    for _ in range(n):
        if prompts and rng.random() < 0.2:
            prompts.append(list(rng.choice(prompts)))
            continue
        length = rng.randint(1, mml - 1)
        shared = rng.choice((length, length, rng.randint(0, length),
                             lcm * (length // lcm), hbs * (length // hbs),
                             lcm * (length // lcm) + hbs))
        shared = min(shared, length)
        prompts.append(rng.choice(bases)[:shared] +
                       [rng.randint(1, 40) for _ in range(length - shared)])
    t["mml"], t["prompts"] = mml, prompts
    t["outs"] = [rng.choice((1, 2, 3, rng.randint(1, 8), rng.randint(1, 2 * lcm)))
                 for _ in range(n)]


def gen_trace(seed, index, mix, cfg):
    t = vp.gen_trace(seed, index)
    rng = random.Random((seed * 1000003 + index) * 7 + MIXES.index(mix))
    t["mix"] = mix
    t["spec"] = spec_for(t, rng)
    t["groups"] = kvslot_groups(t["spec"], t["bs"], t["mml"], mamba_mode(mix),
                                refusable=mix in PACKED)
    if t["groups"] is None:
        # a packed model vLLM cannot build either (check_one)
        t["groups"], t["num_blocks"] = [], 2 * t["num_blocks"]
        return t
    # vLLM's hash block with prefix caching: the GCD of the block sizes
    t["hbs"] = functools.reduce(math.gcd, [g["block_size"] for g in t["groups"]])
    if mix in ("mixed-blocks", "mamba-align-mixed") and rng.random() < 0.75:
        longer_prompts(t, rng)
        t["groups"] = kvslot_groups(t["spec"], t["bs"], t["mml"], mamba_mode(mix))
    elif mix in PACKED and rng.random() < 0.5:
        # prompts of several blocks sharing prefixes, some sent twice: hits
        # past the sliding windows
        longer_prompts(t, rng)
        if "mamba" in mix:
            # the Mamba block in cache mode none is the model length
            t["groups"] = kvslot_groups(t["spec"], t["bs"], t["mml"], mamba_mode(mix),
                                        refusable=True)
            if t["groups"] is None:
                t["groups"], t["num_blocks"] = [], 2 * t["num_blocks"]
                return t
    for g in t["groups"]:
        if g["kind"] == "chunked_local" and "attention_chunk_size" not in g:
            g["attention_chunk_size"] = g.get("chunk", g.get("window"))
    need = 0
    for i, p in enumerate(t["prompts"]):
        maxc = len(p) + max(1, min(t["outs"][i], t["mml"] - len(p))) - 1
        need = max(need, sum(group_need(t, g, maxc, "async" in cfg)
                             for g in t["groups"]))
    t["num_blocks"] = need + 1 + rng.choice((0, 0, 1, 2, rng.randint(0, 4 * len(t["prompts"])),
                                             rng.randint(0, 12 * len(t["prompts"]))))
    if any(g["kind"] in RECYCLING for g in t["groups"]) and rng.random() < 0.3:
        # a tiny pool below that bound, down to the first chunk of the
        # longest prompt: vLLM runs some, and waits or preempts without
        # end on others, which kvslot must refuse
        lo = max(sum(-(-min(len(p), t["budget"]) // g["block_size"]) for g in t["groups"])
                 for p in t["prompts"])
        t["num_blocks"] = rng.randint(min(lo, need) + 1, need + 1)
        t["tiny"] = True
    return t


def spec_of(t, g):
    kw = dict(block_size=g["block_size"], num_kv_heads=1, head_size=8, dtype=torch.float16)
    if g["kind"] == "sliding_window":
        return SlidingWindowSpec(sliding_window=g["sliding_window"], **kw)
    if g["kind"] == "chunked_local":
        return ChunkedLocalAttentionSpec(attention_chunk_size=g["attention_chunk_size"], **kw)
    if g["kind"] == "mla_sliding_window":
        return SlidingWindowMLASpec(sliding_window=g["sliding_window"],
                                    max_tp_shards=1, **kw)
    if g["kind"] == "mla":
        return MLAAttentionSpec(max_tp_shards=1, **kw)
    if g["kind"] == "mamba":
        return MambaSpec(block_size=g["block_size"], shapes=((1,),),
                         dtypes=(torch.float16,), mamba_cache_mode=mamba_mode(t["mix"]))
    return FullAttentionSpec(**kw)


def make_scheduler(t, apc, reserve, asynch=False, events=True):
    """vllm_plan.make_scheduler with the trace's KV-cache groups."""
    bs, mml = t["bs"], t["mml"]
    sc = SchedulerConfig(
        max_num_batched_tokens=t["budget"], max_num_seqs=t["seqs"],
        max_model_len=mml, is_encoder_decoder=False,
        enable_chunked_prefill=True, async_scheduling=asynch,
        scheduler_reserve_full_isl=reserve)
    # the cache block size after vLLM's hybrid alignment: the Mamba block
    # in cache mode align (it can exceed bs when the first attention
    # layer's page is the smaller one)
    mb = [g["block_size"] for g in t["groups"] if g["kind"] == "mamba"]
    if t["mix"] in PACKED and hybrid_alignment(t) is not None:
        # vLLM's own alignment (packed_specs builds the layers on it)
        mb = [hybrid_alignment(t).block_size]
    cc = CacheConfig(block_size=mb[0] if mb and (mamba_mode(t["mix"]) == "align" or
                                                 t["mix"] in PACKED) else bs,
                     enable_prefix_caching=apc,
                     mamba_cache_mode=mamba_mode(t["mix"]))
    cc.num_gpu_blocks = t["num_blocks"]
    ev = KVEventsConfig(enable_kv_cache_events=True, publisher="null") if apc and events else None
    vc = VllmConfig(scheduler_config=sc, cache_config=cc, kv_events_config=ev)
    object.__setattr__(vc, "model_config", vp.ModelStandIn(mml))
    if t["mix"] in PACKED:
        kcc = packed_kv_cache_config(t, cc.prefix_cache_retention_interval)
    else:
        kcc = KVCacheConfig(
            num_blocks=t["num_blocks"], kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer.%s" % x for x in g["layers"]],
                                              spec_of(t, g))
                             for g in t["groups"]],
            prefix_cache_retention_interval=cc.prefix_cache_retention_interval)
    sbs, hbs = resolve_kv_cache_block_sizes(kcc, vc)
    assert vc.max_in_flight_tokens == t["budget"] * (2 if asynch else 1)
    sched = (AsyncScheduler if asynch else Scheduler)(
        vllm_config=vc, kv_cache_config=kcc,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=sbs, hash_block_size=hbs, log_stats=False)
    rec = vp.EventRecorder()
    sched.kv_event_publisher = rec
    hasher = None
    if apc:
        fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(fn)
        hasher = get_request_block_hasher(hbs, fn)
    return sched, rec, hasher


_record_step = vp.record_step


def kv_hash(t, i, k, parent):
    """vllm_plan.kv_hash over hash blocks of t["hbs"] tokens (kvslot plan
    hashes at vLLM's hash block size, the GCD of the groups' blocks)."""
    hbs = t.get("hbs", t["bs"])
    buf = bytearray(parent.to_bytes(8, "little"))
    for j in range(k * hbs, (k + 1) * hbs):
        buf += (vp.token_at(t, i, j) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    if t["loras"] and t["loras"][i] > 0:
        buf += t["loras"][i].to_bytes(8, "little")
    if k == 0 and t["salts"]:
        buf += t["salts"][i].encode()
    return vp.xxhash.xxh3_64_intdigest(bytes(buf))


def record_step(step, so, sched, pool, reqs, cached, npre):
    """vllm_plan.record_step with every group's block table; _hits counts
    the requests admitted or resumed with a prefix-cache hit."""
    rs = _record_step(step, so, sched, pool, reqs, cached, npre)
    cr = so.scheduled_cached_reqs
    rs["_hits"] = (sum(1 for nr in so.scheduled_new_reqs if nr.num_computed_tokens > 0) +
                   sum(1 for rid, c in zip(cr.req_ids, cr.num_computed_tokens)
                       if rid in cr.resumed_req_ids and c > 0))
    for rid in so.num_scheduled_tokens:
        rows = []
        for ids in sched.kv_cache_manager.get_block_ids(rid):
            row = list(ids)
            while row and row[-1] == 0:
                row.pop()
            rows.append(row)
        rs["table"][int(rid)] = rows
    return rs


vp.make_scheduler = make_scheduler
vp.record_step = record_step
vp.kv_hash = kv_hash


def kvslot_args(t, apc, reserve, pf, asynch):
    a = vp.kvslot_args(t, apc, reserve, pf, asynch)
    a[a.index("-f") + 1] = "json"
    a += ["--kv-groups", t["spec"], "--kernel-block", str(t["bs"])]
    if "mamba" in t["mix"]:
        a += ["--mamba-cache-mode", mamba_mode(t["mix"])]
    return a


def parse_kvslot(text, apc, ng):
    out = []
    for line in text.splitlines():
        s = json.loads(line)
        ids = s.get("req_ids", [])
        tables = {}
        for k, i in enumerate(ids):
            rows = []
            for g in range(ng):
                row = list(s["block_table.g%d" % g][k])
                while row and row[-1] == 0:
                    row.pop()
                rows.append(row)
            tables[i] = rows
        out.append({"step": s["step"], "sched": dict(zip(ids, s.get("num_scheduled_tokens", []))),
                    "computed": dict(zip(ids, s.get("num_computed_tokens", []))),
                    "table": tables, "waiting": s.get("waiting", []),
                    "preempted": sorted(s.get("preempted", [])),
                    "finished": sorted(s.get("finished", [])),
                    "free": s.get("free_blocks"),
                    "shared": sorted(s.get("shared_blocks", [])) if apc else [],
                    "evicted": sorted(s.get("evicted_hashes", [])) if apc else [],
                    "cached": dict(zip(ids, s.get("num_cached_tokens", []))) if apc else {}})
    return out


def config_of(mix, index):
    """The configuration trace index runs in: the eight in turn; a Mamba
    mix the four without prefix caching (vLLM's Mamba cache mode "none"
    refuses it)."""
    cs = [c for c in CONFIGS if mix not in ("full+mamba", "mamba-packed")
          or c.startswith("plain")]
    return cs[index % len(cs)]


def hits(vs):
    """Steps that admitted or resumed a request with a prefix-cache hit,
    and such admissions."""
    return (sum(1 for s in vs if s.get("_hits")), sum(s.get("_hits", 0) for s in vs))


def check(job):
    """check_one, with the tiny-pool outcome counts of this trace and the
    vLLM steps it did not compare (a run vLLM cannot go on with, which
    kvslot refused)."""
    TINY.clear()
    r = check_one(job)
    uncompared = r[3] if any(v[1] for v in TINY.values()) and isinstance(r[3], int) else 0
    return r + ({k: v for k, v in TINY.items() if k}, uncompared)


def check_one(job):
    kvslot, seed, index, mix = job
    cfg = config_of(mix, index)
    apc, reserve, asynch = vp.parse_cfg(cfg)
    t = gen_trace(seed, index, mix, cfg)
    d = tempfile.mkdtemp(prefix="kvh")
    try:
        pf = vp.write_prompts(t, d)
        args = kvslot_args(t, apc, reserve, pf, asynch)
        try:
            p = subprocess.run([kvslot] + args, capture_output=True, text=True,
                               timeout=vp.KVSLOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(args, -1, "", "timeout")
        try:
            vs, verr = vp.run_vllm(t, apc, reserve, asynch)
        except VllmCannotBuild as e:
            # vLLM cannot build the model's groups at start-up (a packed
            # bucket its pattern repeats split unevenly): kvslot must
            # refuse the spec, exit 2, nothing written
            if p.returncode == 2 and not p.stdout and "vLLM 0.33.0" in p.stderr:
                return (index, mix, cfg, "refused", None, args)
            return (index, mix, cfg, 0, ("vllm", "cannot build", str(e),
                                         "exit %d: %s" % (p.returncode, p.stderr.strip()[:200])), args)
        except AssertionError as e:
            # vLLM refuses the groups at its first lookup (a chunked local
            # group whose blocks are not the LCM): kvslot must refuse them
            # with the same words, exit 2, nothing written
            if str(e) and p.returncode == 2 and not p.stdout and str(e) in p.stderr:
                return (index, mix, cfg, "refused", None, args)
            return (index, mix, cfg, 0, ("vllm", "error", repr(e),
                                         "exit %d: %s" % (p.returncode, p.stderr.strip()[:200])), args)
        except Exception as e:  # noqa: BLE001
            return (index, mix, cfg, 0, ("vllm", "error", repr(e), ""), args)
        if "vllm_groups" in t:
            mine = [["layer.%s" % x for x in g["layers"]] for g in t["groups"]]
            if mine != t["vllm_groups"]:
                return (index, mix, cfg, 0, (0, "groups", t["vllm_groups"], mine), args)
        if p.returncode != 0:
            if verr is not None and (not t.get("tiny") or "could never run" in p.stderr or
                                     "without end" in p.stderr):
                TINY[mix if t.get("tiny") else None][1] += 1
                return (index, mix, cfg, len(vs), None, args)
            return (index, mix, cfg, len(vs), (0, "exit", "ran %d steps" % len(vs),
                                               "exit %d: %s" % (p.returncode, p.stderr.strip()[:200])), args)
        ks = parse_kvslot(p.stdout, apc, len(t["groups"]))
        if verr is not None:
            return (index, mix, cfg, len(vs), (len(vs), "exit", verr, "ran %d steps" % len(ks)), args)
        TINY[mix if t.get("tiny") else None][0] += 1
        return (index, mix, cfg, vp.stats(vs) + hits(vs), vp.compare(vs, ks, apc), args)
    finally:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


class _Tiny(dict):
    """Traces with a tiny pool per mix: [ran by both, refused by kvslot
    where vLLM could not go on]."""
    def __missing__(self, k):
        self[k] = [0, 0]
        return self[k]


TINY = _Tiny()


def vllm_refusal(case):
    """vLLM's own message refusing context parallelism with a group kind:
    SlidingWindowSpec.max_memory_usage_bytes at start-up (DCP with a
    sliding window), the HybridKVCacheCoordinator's assertion (DCP with a
    chunked group, prefix caching on), the model runner's
    PCPManager.validate_config (PCP in a model without MLA: the Scheduler
    hands its KV cache manager a PCP size of 1, so the coordinator's PCP
    assertion never fires), called on the spec, the coordinator or the
    check alone; None when vLLM accepts it."""
    from types import SimpleNamespace as NS
    kw = dict(block_size=4, num_kv_heads=1, head_size=8, dtype=torch.float16)
    try:
        if case == "pcp-chunked":
            from vllm.v1.worker.gpu.pcp_manager import PCPManager
            PCPManager.validate_config(
                NS(parallel_config=NS(prefill_context_parallel_size=2),
                   model_config=NS(use_mla=False, is_encoder_decoder=False),
                   lora_config=None), False)
        elif case == "dcp-sliding":
            vc = NS(parallel_config=NS(decode_context_parallel_size=2),
                    max_in_flight_tokens=8, model_config=NS(max_model_len=16))
            SlidingWindowSpec(sliding_window=4, **kw).max_memory_usage_bytes(vc)
        else:
            kcc = KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=[
                KVCacheGroupSpec(["layer.0"], ChunkedLocalAttentionSpec(attention_chunk_size=8, **kw)),
                KVCacheGroupSpec(["layer.1"], FullAttentionSpec(**kw))])
            get_kv_cache_coordinator(
                kcc, 16, 8, use_eagle=False, enable_caching=True, enable_kv_cache_events=False,
                dcp_world_size=2, pcp_world_size=1,
                scheduler_block_size=4, hash_block_size=4)
    except (AssertionError, NotImplementedError) as e:
        return str(e)
    return None


def check_refusals():
    """Each context-parallel refusal: vLLM refuses, kvslot exits 2 with
    vLLM's message and writes nothing.  Returns (passed, failed)."""
    args = {"dcp-sliding": ["--kv-groups", "sliding=4,full", "--cp-size", "2"],
            "dcp-chunked": ["--kv-groups", "chunked=8,full", "--cp-size", "2"],
            "pcp-chunked": ["--kv-groups", "chunked=8,full", "--pcp-size", "2"]}
    d = tempfile.mkdtemp(prefix="kvh")
    pf = os.path.join(d, "p.txt")
    with open(pf, "w") as f:
        f.write("1 2 3 4 5 6\n")
    ok = bad = 0
    for case, extra in args.items():
        msg = vllm_refusal(case)
        p = subprocess.run([KVSLOT, "plan", "--prompts", pf, "--enable-prefix-caching",
                            "--max-tokens", "8", "-B", "4", "--max-model-len", "16",
                            "--kernel-block", "4"] + extra, capture_output=True, text=True)
        if msg and p.returncode == 2 and not p.stdout and msg in p.stderr:
            ok += 1
            print("  refused by both, %s: %s" % (case, msg))
        else:
            bad += 1
            print("FAIL refusal %s: vLLM %r, kvslot exit %d: %s"
                  % (case, msg, p.returncode, p.stderr.strip()[:200]))
    os.unlink(pf)
    os.rmdir(d)
    return ok, bad


def main():
    global KVSLOT
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--traces", type=int, default=3000, help="traces per mix")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mixes", default=",".join(MIXES))
    ap.add_argument("--one", help="SEED:INDEX:MIX, print both step lists")
    ap.add_argument("--show", type=int, default=5)
    o = ap.parse_args()
    KVSLOT = os.path.abspath(o.kvslot)
    print("vLLM %s (torch %s): Scheduler, HybridKVCacheCoordinator, BlockPool from %s"
          % (vllm.__version__, torch.__version__.split("+")[0],
             os.path.dirname(vllm.__file__)), flush=True)
    if o.one:
        seed, index, mix = o.one.split(":")
        cfg = config_of(mix, int(index))
        t = gen_trace(int(seed), int(index), mix, cfg)
        apc, reserve, asynch = vp.parse_cfg(cfg)
        vs, verr = vp.run_vllm(t, apc, reserve, asynch)
        print("trace (%s):" % cfg, t)
        with open("kvh-prompts.txt", "w") as f:
            f.write("".join(" ".join(map(str, p)) + "\n" for p in t["prompts"]))
        for k, s in enumerate(vs):
            print("vllm step", k + 1, {x: y for x, y in s.items() if not x.startswith("_")})
        if verr:
            print("vllm:", verr)
        r = check((KVSLOT, int(seed), int(index), mix))
        print("kvslot", vp.shell_quote([x if not x.endswith("/p.txt") else "kvh-prompts.txt"
                                        for x in r[5]]))
        print("first difference:", r[4])
        return 0 if r[4] is None else 1
    mixes = o.mixes.split(",")
    jobs = [(KVSLOT, o.seed, i, m) for m in mixes for i in range(o.traces)]
    if o.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(o.jobs) as pool:
            res = pool.map(check, jobs, chunksize=16)
    else:
        res = [check(j) for j in jobs]
    passed = failed = steps = shown = 0
    by = {m: [0, 0, 0, 0] for m in mixes}
    # prefix caching, per mix and sync/async: traces, steps, steps with a
    # hit, admissions with a hit, traces refused by both
    pc = {}
    tiny = {}
    nobuild = {}            # models refused by both, prefix caching off
    uncompared = 0
    for index, mix, cfg, nsteps, diff, args, tn, unc in res:
        uncompared += unc if diff is None else 0
        for m, (ran, refused) in tn.items():
            a = tiny.setdefault(m, [0, 0])
            a[0] += ran if diff is None else 0
            a[1] += refused if diff is None else 0
        if nsteps == "refused":
            if cfg.startswith("apc"):
                pc.setdefault((mix, "async" in cfg), [0, 0, 0, 0, 0])[4] += 1
            else:
                nobuild[mix] = nobuild.get(mix, 0) + 1
            nsteps = 0
        if isinstance(nsteps, tuple):
            by[mix][3] += nsteps[2]
            if cfg.startswith("apc") and diff is None:
                a = pc.setdefault((mix, "async" in cfg), [0, 0, 0, 0, 0])
                a[0] += 1
                a[1] += nsteps[0]
                a[2] += nsteps[-2]
                a[3] += nsteps[-1]
            nsteps = nsteps[0]
        steps += nsteps
        by[mix][2] += nsteps - (unc if diff is None else 0)
        if diff is None:
            passed += 1
            by[mix][0] += 1
            continue
        failed += 1
        by[mix][1] += 1
        if shown < o.show:
            shown += 1
            print("FAIL trace %d (%s, %s): step %s, %s: vLLM %s, kvslot %s"
                  % (index, mix, cfg, diff[0], diff[1], diff[2], diff[3]))
            print("  both sides: $(scripts/pyenv crosscheck) scripts/crosscheck/kvslot-hybrid.py "
                  "build/bin/kvslot --one %d:%d:%s" % (o.seed, index, mix))
    for m in mixes:
        print("  %-14s %d passed, %d failed (%d steps compared, %d preemptions; %d configurations "
              "in turn)" % (m, *by[m], len({config_of(m, i) for i in range(len(CONFIGS))})))
    for (m, asy), a in sorted(pc.items()):
        print("  %-14s prefix caching, %s: %d traces (%d steps, %d with a hit, %d hits), "
              "%d refused by both" % (m, "async" if asy else "sync", *a))
    for m, n in sorted(nobuild.items()):
        print("  %-14s prefix caching off: %d refused by both" % (m, n))
    for m, (ran, nref) in sorted(tiny.items()):
        print("  %-14s tiny pools under kvslot's bound: %d run by both, %d where vLLM "
              "cannot go on refused by kvslot" % (m, ran, nref))
    print("  %d traces per mix, %d vLLM steps compared (and %d steps of vLLM's runs that "
          "cannot go on, which kvslot refused)" % (o.traces, steps - uncompared, uncompared))
    ok, bad = check_refusals()
    passed += ok
    failed += bad
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
