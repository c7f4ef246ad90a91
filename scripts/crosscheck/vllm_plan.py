"""kvslot plan against vLLM's own scheduler (scripts/crosscheck/kvslot-plan.sh).

vLLM's Scheduler.schedule() / update_from_output(), KVCacheManager, BlockPool,
its free queue and its block-hash chain run unmodified from the installed
release; this file supplies only what an engine process would around them
(the replacements are listed in kvslot-plan.sh).  Random traces with a fixed
seed run through vLLM and through 'kvslot plan' (and through vLLM's
AsyncScheduler in an asynchronous engine loop and 'kvslot plan
--async-scheduling'); a trace passes when every
step agrees on the scheduled requests and tokens, the computed and cached
tokens, the block tables, the waiting queue, preemptions, finishes, free
blocks, shared blocks and evicted hashes.

usage: python vllm_plan.py KVSLOT [--traces N] [--seed S] [--jobs J]
       python vllm_plan.py KVSLOT --one SEED:INDEX:CONFIG   (one trace, verbose)
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

# Replacement 1: the platform.  vLLM picks CUDA, ROCm, CPU... by probing the
# machine; its scheduler does not depend on it.  A bare Platform that says
# "cpu" and changes no setting stands in (vllm_host.py, with the logging
# quietened).
import vllm_host  # noqa: E402,F401

import torch  # noqa: E402
import xxhash  # noqa: E402
import vllm  # noqa: E402
from vllm.config import CacheConfig, KVEventsConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.distributed.kv_events import BlockRemoved  # noqa: E402
from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
    maybe_convert_block_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.engine.input_processor import InputProcessor  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

FIELDS = ("step,req_ids,num_scheduled_tokens,num_computed_tokens,block_table,"
          "waiting,preempted,finished,free_blocks")
APC_FIELDS = ",num_cached_tokens,shared_blocks,evicted_hashes"
CONFIGS = ("apc", "apc-noreserve", "plain", "plain-noreserve")
ASYNC_CONFIGS = ("apc-async", "apc-noreserve-async", "plain-async", "plain-noreserve-async")
MAX_STEPS = 5000
KVSLOT_TIMEOUT = 10


class ModelStandIn:
    """Replacement 2: the model config.  vLLM's ModelConfig reads a Hugging
    Face model; the scheduler reads only these attributes of it."""

    def __init__(self, max_model_len):
        self.max_model_len = max_model_len
        self.uses_mrope = False
        self.is_encoder_decoder = False
        self.runner_type = "generate"
        self.is_diffusion = False
        self.supports_multimodal_inputs = False
        self.is_multimodal_model = False
        self.skip_tokenizer_init = True
        self.return_sampling_mask = None
        self.multimodal_config = None


class EventRecorder:
    """Replacement 3: the KV-event publisher (a ZMQ socket upstream) keeps the
    batches the scheduler publishes, for the evicted hashes."""

    def __init__(self):
        self.batches = []

    def publish(self, batch):
        self.batches.append(batch)

    def shutdown(self):
        pass


# ---------------------------------------------------------------- traces


def record_step(step, so, sched, pool, reqs, cached, npre):
    """What one schedule() call did, as kvslot plan prints a step: the
    scheduled tokens, computed and cached tokens, block tables, waiting
    queue, preemptions (npre: each request's count before the call), free
    and shared blocks.  cached keeps each request's hit tokens, known from
    its first admission on."""
    rs = {"step": step, "sched": {}, "computed": {}, "table": {}, "cached": {}}
    for nr in so.scheduled_new_reqs:
        rs["computed"][int(nr.req_id)] = nr.num_computed_tokens
    cr = so.scheduled_cached_reqs
    for rid, c in zip(cr.req_ids, cr.num_computed_tokens):
        rs["computed"][int(rid)] = c
    for rid, k in so.num_scheduled_tokens.items():
        i = int(rid)
        rs["sched"][i] = k
        rs["table"][i] = list(sched.kv_cache_manager.get_block_ids(rid)[0])
        ps = reqs[i].prefill_stats      # set at the first admission
        if ps is not None:
            cached[i] = ps.num_cached_tokens
        rs["cached"][i] = cached.get(i)
    rs["waiting"] = [int(r.request_id) for r in sched.waiting]
    rs["preempted"] = sorted(i for i, r in reqs.items() if r.num_preemptions > npre[i])
    rs["free"] = pool.get_num_free_blocks()
    rs["shared"] = sorted(b.block_id for b in pool.blocks if b.ref_cnt > 1)
    return rs

def gen_trace(seed, index):
    rng = random.Random(seed * 1000003 + index)
    bs = rng.choice((4, 16))
    mml = bs * rng.randint(2, 8) + rng.randint(0, bs - 1)
    n = rng.randint(1, 8)
    bases = [[rng.randint(1, 40) for _ in range(mml)] for _ in range(rng.randint(1, 3))]
    prompts = []
    for _ in range(n):
        length = rng.randint(1, mml - 1)
        base = rng.choice(bases)
        shared = rng.choice((0, length, rng.randint(0, length), bs * (length // bs)))
        p = base[:shared] + [rng.randint(1, 40) for _ in range(length - shared)]
        prompts.append(p)
    budget = rng.choice((bs, 2 * bs, rng.randint(1, 3 * mml), rng.randint(mml, 4 * mml)))
    budget = max(budget, 1)
    seqs = min(budget, rng.choice((1, 2, 3, 4, 8, 256)))
    need = -(-mml // bs) + 1
    num_blocks = need + rng.choice((0, 0, 1, 2, rng.randint(0, 3 * n), rng.randint(0, 12 * n)))
    outs = [rng.choice((1, 2, 3, rng.randint(1, 8), rng.randint(1, 2 * bs)))
            for _ in range(n)]
    t = {"bs": bs, "mml": mml, "prompts": prompts, "budget": budget,
         "seqs": seqs, "num_blocks": num_blocks, "outs": outs,
         "arrivals": None, "salts": None, "loras": None}
    if rng.random() < 0.4:
        t["arrivals"] = sorted(rng.randint(1, 8) for _ in range(n))
    if rng.random() < 0.3:
        t["salts"] = [rng.choice(("s", "t")) for _ in range(n)]
    if rng.random() < 0.3:
        t["loras"] = [rng.choice((0, 1, 2)) for _ in range(n)]
    return t


def token_at(t, i, j):
    """kvslot's token ids: the prompt's, then -1 - (i << 32) - k for the
    k-th output token of request i (an id no prompt has).  The stand-in
    model runner samples exactly these."""
    p = t["prompts"][i]
    return p[j] if j < len(p) else -1 - (i << 32) - (j - len(p))


def kv_hash(t, i, k, parent):
    """kvslot(1)'s block hash: XXH3-64 of parent, token ids (int64 LE), LoRA
    id when above 0, then the salt on the first block."""
    bs = t["bs"]
    buf = bytearray(parent.to_bytes(8, "little"))
    for j in range(k * bs, (k + 1) * bs):
        buf += (token_at(t, i, j) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    if t["loras"] and t["loras"][i] > 0:
        buf += t["loras"][i].to_bytes(8, "little")
    if k == 0 and t["salts"]:
        buf += t["salts"][i].encode()
    return xxhash.xxh3_64_intdigest(bytes(buf))


# ---------------------------------------------------------------- vLLM

def make_request(t, i, hasher):
    """vLLM's Request for prompt i of trace t (its LoRA and salt if any)."""
    lora = None
    if t["loras"] and t["loras"][i] > 0:
        lid = t["loras"][i]
        lora = LoRARequest("lora%d" % lid, lid, "/lora/%d" % lid)
    return Request(
        request_id=str(i), prompt_token_ids=list(t["prompts"][i]),
        sampling_params=SamplingParams(max_tokens=t["outs"][i], ignore_eos=True),
        pooling_params=None, arrival_time=float(i),
        lora_request=lora,
        cache_salt=t["salts"][i] if t["salts"] else None,
        block_hasher=hasher)


def map_hashes(t, reqs, mapped, kvh, hmap):
    """Extend hmap (vLLM block hash -> kvslot hash) over the blocks the
    requests have hashed since the last call (mapped[i] of them done)."""
    for i, r in reqs.items():
        while mapped[i] < len(r.block_hashes):
            k = mapped[i]
            kvh[i].append(kv_hash(t, i, k, kvh[i][k - 1] if k else 0))
            hmap[maybe_convert_block_hash(r.block_hashes[k])] = kvh[i][k]
            mapped[i] += 1


def evicted(events, hmap):
    """The kvslot hashes of the blocks the KV events removed, sorted."""
    ev = []
    for e in events:
        if isinstance(e, BlockRemoved):
            for h in e.block_hashes:
                ev.append("%016x" % hmap[h] if h in hmap else "?")
    return sorted(ev)


def finished_ids(outs):
    """The request ids update_from_output reports finished."""
    return [int(o.request_id) for eco in outs.values() for o in eco.outputs
            if o.finish_reason is not None]


def make_scheduler(t, apc, reserve, asynch=False, events=True):
    """vLLM's Scheduler (or AsyncScheduler) for trace t's configuration,
    with the KV-event recorder attached when prefix caching and events are
    on; returns it, the recorder and the request block hasher (None without
    prefix caching)."""
    bs, mml = t["bs"], t["mml"]
    sc = SchedulerConfig(
        max_num_batched_tokens=t["budget"], max_num_seqs=t["seqs"],
        max_model_len=mml, is_encoder_decoder=False,
        enable_chunked_prefill=True, async_scheduling=asynch,
        scheduler_reserve_full_isl=reserve)
    cc = CacheConfig(block_size=bs, enable_prefix_caching=apc)
    cc.num_gpu_blocks = t["num_blocks"]
    ev = KVEventsConfig(enable_kv_cache_events=True, publisher="null") if apc and events else None
    vc = VllmConfig(scheduler_config=sc, cache_config=cc, kv_events_config=ev)
    object.__setattr__(vc, "model_config", ModelStandIn(mml))
    kcc = KVCacheConfig(
        num_blocks=t["num_blocks"], kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], FullAttentionSpec(
            block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.float16))])
    sched = (AsyncScheduler if asynch else Scheduler)(
        vllm_config=vc, kv_cache_config=kcc,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=bs, log_stats=False)
    rec = EventRecorder()
    sched.kv_event_publisher = rec
    hasher = None
    if apc:
        fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(fn)
        hasher = get_request_block_hasher(bs, fn)
    if asynch:
        assert vc.max_concurrent_batches == 2
    return sched, rec, hasher


def run_vllm(t, apc, reserve, asynch=False):
    sched, rec, hasher = make_scheduler(t, apc, reserve, asynch)
    if asynch:
        return run_engine_async(t, apc, sched, rec, hasher)
    pool = sched.kv_cache_manager.block_pool
    n = len(t["prompts"])
    arrivals = t["arrivals"] or [1] * n
    reqs = {}
    hmap = {}          # vLLM block hash (external form) -> kvslot hash
    mapped = [0] * n
    kvh = [[] for _ in range(n)]
    cached = {}
    steps = []
    finished = set()
    step = 0
    while len(finished) < n:
        step += 1
        if step > MAX_STEPS:
            return steps, "no progress after %d steps" % MAX_STEPS
        for i in range(n):
            if arrivals[i] == step:
                r = make_request(t, i, hasher)
                reqs[i] = r
                sched.add_request(r)
        if sched.has_requests() and not sched.has_unfinished_requests():
            # EngineCore calls schedule() once more only to hand the finished
            # ids to the model runner; it schedules nothing and is no step.
            flush = sched.schedule()
            assert flush.total_num_scheduled_tokens == 0
            sched.update_from_output(flush, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
        if not sched.has_requests():
            # an idle step (nothing arrived yet): kvslot prints none either
            continue
        npre = {i: r.num_preemptions for i, r in reqs.items()}
        so = sched.schedule()
        rec_step = record_step(step, so, sched, pool, reqs, cached, npre)
        # (a step whose one running request preempted itself is a step:
        # the next readmits it)
        if (so.total_num_scheduled_tokens == 0 and all(a <= step for a in arrivals)
                and not rec_step["preempted"]):
            steps.append(rec_step)
            return steps, "step %d: nothing can be scheduled" % step
        # Replacement 4: the model runner.  Every scheduled request whose
        # prompt is then complete samples one token (kvslot's id for it);
        # a partial prefill samples none, as the GPU runner discards it.
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            r = reqs[int(rid)]
            if r.num_computed_tokens >= r.num_tokens:
                sampled.append([token_at(t, int(rid), r.num_tokens)])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)},
                                sampled_token_ids=sampled)
        nbatch = len(rec.batches)
        outs = sched.update_from_output(so, mro)
        done = finished_ids(outs)
        finished.update(done)
        rec_step["finished"] = sorted(done)
        if apc:
            map_hashes(t, reqs, mapped, kvh, hmap)
            rec_step["evicted"] = evicted([e for b in rec.batches[nbatch:] for e in b.events],
                                          hmap)
        else:
            rec_step["evicted"] = []
        steps.append(rec_step)
    return steps, None


def run_engine_async(t, apc, sched, rec, hasher):
    """Replacement 1b: the asynchronous engine loop, EngineCore.run_busy_loop
    with step_with_batch_queue and a batch queue of two (the
    max_concurrent_batches of async scheduling): requests arriving by the
    next step are added, then schedule() when the scheduler has requests,
    the batch queued; update_from_output() of the oldest batch only when the
    queue is full or nothing more can be scheduled.  A schedule() call is a
    step while some request has not had its last token scheduled (kvslot
    prints none after that); one that only hands finished ids on, with no
    unfinished request, is none either, as in the synchronous loop."""
    from collections import deque
    pool = sched.kv_cache_manager.block_pool
    n = len(t["prompts"])
    arrivals = t["arrivals"] or [1] * n
    reqs = {}
    hmap = {}
    mapped = [0] * n
    kvh = [[] for _ in range(n)]
    cached = {}
    steps = []
    queue = deque()
    step = 0
    iters = 0

    def ending(i):
        if i not in reqs:
            return False
        r = reqs[i]
        if r.is_finished():
            return True
        ph = r.num_output_placeholders
        return (r.num_output_tokens + ph >= t["outs"][i]
                or r.num_tokens + ph >= t["mml"])

    def resolve(recs):
        if not apc:
            return
        map_hashes(t, reqs, mapped, kvh, hmap)
        for rs in recs:
            if rs is not None and "_events" in rs:
                rs["evicted"] = evicted(rs.pop("_events"), hmap)

    while True:
        iters += 1
        if iters > 2 * MAX_STEPS:
            return steps, "no progress after %d engine iterations" % iters
        # _process_input_queue: what has arrived by the next step
        for i in range(n):
            if i not in reqs and arrivals[i] <= step + 1:
                reqs[i] = make_request(t, i, hasher)
                sched.add_request(reqs[i])
        if not sched.has_requests() and not queue:
            if len(reqs) == n:
                break
            # no work: the engine blocks on its input queue (an idle step)
            step = min(arrivals[i] for i in range(n) if i not in reqs) - 1
            continue
        # step_with_batch_queue
        if sched.has_requests():
            is_step = (sched.has_unfinished_requests()
                       and not all(ending(i) for i in range(n)))
            npre = {i: r.num_preemptions for i, r in reqs.items()}
            inflight = {int(x) for q in queue for x in q[0].num_scheduled_tokens}
            held = {i for i in range(n) if ending(i)}
            mark = len(pool.kv_event_queue)
            was_empty = not queue
            so = sched.schedule()
            executed = so.total_num_scheduled_tokens > 0
            rs = None
            if is_step:
                step += 1
                if step > MAX_STEPS:
                    return steps, "no progress after %d steps" % MAX_STEPS
                rs = record_step(step, so, sched, pool, reqs, cached, npre)
                rs["finished"], rs["evicted"] = [], []
                # coverage: victims with a step in flight, victims whose
                # last token is in flight (finished, not yet freed)
                rs["_inflight_victims"] = len(inflight.intersection(rs["preempted"]))
                rs["_held_victims"] = len(held.intersection(rs["preempted"]))
                rs["_events"] = list(pool.kv_event_queue[mark:])
                steps.append(rs)
                if not executed and was_empty and len(reqs) == n and not rs["preempted"]:
                    resolve([rs])
                    return steps, "step %d: nothing can be scheduled" % step
            # Replacement 4 (asynchronous): the model runner's batch; which
            # rows sample is known when scheduled (a partial prefill does not)
            samples = {rid: not reqs[int(rid)].is_prefill_chunk
                       for rid in so.num_scheduled_tokens}
            queue.appendleft((so, samples, rs))
            if len(queue) < 2 and (executed or sched.has_requests()):
                resolve([rs])
                continue
        so, samples, rs = queue.pop()
        # the sampled token: kvslot's id for the request's next output token
        ids = list(so.num_scheduled_tokens)
        sampled = [[token_at(t, int(rid), reqs[int(rid)].num_tokens)] if samples[rid] else []
                   for rid in ids]
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)},
                                sampled_token_ids=sampled)
        outs = sched.update_from_output(so, mro)
        done = finished_ids(outs)
        if rs is not None:
            rs["finished"] = sorted(done)
        elif done:
            return steps, "finished %s in a batch that is no step" % done
        resolve(steps[-2:])
    return steps, None


def vllm_refuses_prompt(length, mml):
    """vLLM's own prompt-length check (InputProcessor._validate_prompt_len),
    called on a stand-in holding only the attributes it reads."""
    class P:
        skip_prompt_length_check = False
        supports_mm_inputs = False
        mm_encoder_cache_size = 0
        model_config = ModelStandIn(mml)
    try:
        InputProcessor._validate_prompt_len(P(), length, "decoder")
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


# ---------------------------------------------------------------- kvslot

def kvslot_args(t, apc, reserve, prompts_file, asynch=False):
    a = ["plan", "--prompts", prompts_file, "--max-tokens", str(t["budget"]),
         "-B", str(t["bs"]), "--max-model-len", str(t["mml"]),
         "--num-blocks", str(t["num_blocks"]), "--max-num-seqs", str(t["seqs"]),
         "--output-lens", ",".join(map(str, t["outs"])), "--decode", "-q",
         "-f", "text", "--fields", FIELDS + (APC_FIELDS if apc else "")]
    if apc:
        a.append("--enable-prefix-caching")
    if not reserve:
        a.append("--no-reserve-full-isl")
    if asynch:
        a.append("--async-scheduling")
    if t["arrivals"]:
        a += ["--arrivals", ",".join(map(str, t["arrivals"]))]
    if t["salts"] and apc:
        a += ["--salt", ",".join(t["salts"])]
    if t["loras"] and apc:
        a += ["--lora-ids", ",".join(map(str, t["loras"]))]
    return a


def parse_kvslot(text, apc):
    steps = []
    cur = None
    tables = []
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        v = rest.split()
        if name == "step":
            cur = {"step": [int(v[0])]}
            tables = []
            steps.append(cur)
            continue
        if name == "block_table":
            row = [int(x) for x in v]
            while row and row[-1] == 0:
                row.pop()
            tables.append(row)
            cur["_tables"] = tables
        elif name == "evicted_hashes":
            cur[name] = v
        else:
            cur[name] = [int(x) for x in v]
    out = []
    for s in steps:
        ids = s.get("req_ids", [])
        r = {"step": s["step"][0], "sched": dict(zip(ids, s.get("num_scheduled_tokens", []))),
             "computed": dict(zip(ids, s.get("num_computed_tokens", []))),
             "table": dict(zip(ids, s.get("_tables", []))),
             "waiting": s.get("waiting", []),
             "preempted": sorted(s.get("preempted", [])),
             "finished": sorted(s.get("finished", [])),
             "free": s.get("free_blocks", [None])[0],
             "shared": sorted(s.get("shared_blocks", [])) if apc else [],
             "evicted": sorted(s.get("evicted_hashes", [])) if apc else []}
        r["cached"] = dict(zip(ids, s.get("num_cached_tokens", []))) if apc else {}
        out.append(r)
    return out


KEYS = ("step", "sched", "computed", "cached", "table", "waiting", "preempted",
        "finished", "free", "shared", "evicted")


def compare(vs, ks, apc):
    """None when equal, else (step, field, vllm value, kvslot value)."""
    for k in range(max(len(vs), len(ks))):
        if k >= len(vs) or k >= len(ks):
            return (k + 1, "steps", [x["step"] for x in vs[k:k + 3]],
                    [x["step"] for x in ks[k:k + 3]])
        for key in KEYS:
            if key in ("cached", "shared", "evicted") and not apc:
                continue
            if vs[k].get(key) != ks[k].get(key):
                return (vs[k]["step"], key, vs[k].get(key), ks[k].get(key))
    return None


def write_prompts(t, d):
    path = os.path.join(d, "p.txt")
    with open(path, "w") as f:
        for p in t["prompts"]:
            f.write(" ".join(map(str, p)) + "\n")
    return path


def stats(vs):
    """Steps, steps with no rows, preemptions, preemptions of a request with
    a step in flight, of one whose last token is in flight: what a
    configuration covered."""
    return (len(vs), sum(1 for s in vs if not s["sched"]),
            sum(len(s["preempted"]) for s in vs),
            sum(s.get("_inflight_victims", 0) for s in vs),
            sum(s.get("_held_victims", 0) for s in vs))


def parse_cfg(cfg):
    """apc / plain, -noreserve, -async: (prefix caching, reserve, async)."""
    return (cfg.startswith("apc"), "noreserve" not in cfg, "async" in cfg)


def check(job):
    kvslot, seed, index, cfg = job
    t = gen_trace(seed, index)
    apc, reserve, asynch = parse_cfg(cfg)
    d = tempfile.mkdtemp(prefix="kvx")
    try:
        pf = write_prompts(t, d)
        args = kvslot_args(t, apc, reserve, pf, asynch)
        try:
            p = subprocess.run([kvslot] + args, capture_output=True, text=True,
                               timeout=KVSLOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(args, -1, "", "did not finish in %d s"
                                            % KVSLOT_TIMEOUT)
        try:
            vs, verr = run_vllm(t, apc, reserve, asynch)
        except Exception as e:  # noqa: BLE001
            return (index, cfg, 0, ("vllm", "error", repr(e), ""), args)
        if p.returncode != 0:
            if verr is not None:
                return (index, cfg, len(vs), None, args)   # both refuse to go on
            return (index, cfg, len(vs),
                    (0, "exit", "ran %d steps" % len(vs),
                     "exit %d: %s" % (p.returncode, p.stderr.strip()[:200])), args)
        ks = parse_kvslot(p.stdout, apc)
        if verr is not None:
            return (index, cfg, len(vs), (len(vs), "exit", verr, "ran %d steps" % len(ks)), args)
        return (index, cfg, stats(vs), compare(vs, ks, apc), args)
    finally:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


def check_refusal(job):
    """A prompt of max_model_len tokens or more: vLLM refuses it before the
    scheduler; kvslot must refuse it too (exit 2, nothing on stdout)."""
    kvslot, seed, index = job
    rng = random.Random(seed * 7919 + index)
    bs = rng.choice((4, 16))
    mml = rng.randint(2, 40)
    length = mml + rng.randint(0, 3)
    t = {"bs": bs, "mml": mml, "prompts": [[1] * 3, [5] * length][::rng.choice((1, -1))],
         "budget": 64, "seqs": 4, "num_blocks": 64, "outs": [2, 2],
         "arrivals": None, "salts": None, "loras": None}
    d = tempfile.mkdtemp(prefix="kvx")
    try:
        pf = write_prompts(t, d)
        args = kvslot_args(t, True, True, pf)
        p = subprocess.run([kvslot] + args, capture_output=True, text=True)
    finally:
        os.unlink(os.path.join(d, "p.txt"))
        os.rmdir(d)
    ok = vllm_refuses_prompt(length, mml) and p.returncode == 2 and p.stdout == ""
    return ok, args, p.returncode


def shell_quote(a):
    return " ".join(x if x and all(c.isalnum() or c in "-_.,/=:" for c in x)
                    else "'" + x.replace("'", "'\\''") + "'" for x in a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--async-traces", type=int, default=1000,
                    help="traces run through the asynchronous engine loop")
    ap.add_argument("--refusals", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--one", help="SEED:INDEX:CONFIG, print both step lists")
    ap.add_argument("--show", type=int, default=5)
    o = ap.parse_args()
    print("vLLM %s (torch %s): Scheduler, KVCacheManager, BlockPool from %s"
          % (vllm.__version__, torch.__version__.split("+")[0],
             os.path.dirname(vllm.__file__)), flush=True)
    if o.one:
        seed, index, cfg = o.one.split(":")
        t = gen_trace(int(seed), int(index))
        apc, reserve, asynch = parse_cfg(cfg)
        vs, verr = run_vllm(t, apc, reserve, asynch)
        print("trace:", t)
        with open("kvx-prompts.txt", "w") as f:
            f.write("".join(" ".join(map(str, p)) + "\n" for p in t["prompts"]))
        print("prompts written to kvx-prompts.txt")
        for k, s in enumerate(vs):
            print("vllm step", k + 1, s)
        if verr:
            print("vllm:", verr)
        r = check((o.kvslot, int(seed), int(index), cfg))
        print("kvslot", shell_quote([x if not x.endswith("/p.txt") else "kvx-prompts.txt"
                                     for x in r[4]]))
        print("first difference:", r[3])
        return 0 if r[3] is None else 1
    jobs = [(o.kvslot, o.seed, i, c) for i in range(o.traces) for c in CONFIGS]
    jobs += [(o.kvslot, o.seed, i, c) for i in range(o.async_traces) for c in ASYNC_CONFIGS]
    if o.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(o.jobs) as pool:
            res = pool.map(check, jobs, chunksize=16)
            ref = pool.map(check_refusal, [(o.kvslot, o.seed, i) for i in range(o.refusals)])
    else:
        res = [check(j) for j in jobs]
        ref = [check_refusal((o.kvslot, o.seed, i)) for i in range(o.refusals)]
    passed = failed = steps = 0
    allc = CONFIGS + ASYNC_CONFIGS
    by_cfg = {c: [0] * 7 for c in allc}
    shown = 0
    for index, cfg, nsteps, diff, args in res:
        if isinstance(nsteps, tuple):
            for k in range(1, 5):
                by_cfg[cfg][2 + k] += nsteps[k]
            nsteps = nsteps[0]
        steps += nsteps
        by_cfg[cfg][2] += nsteps
        if diff is None:
            passed += 1
            by_cfg[cfg][0] += 1
            continue
        failed += 1
        by_cfg[cfg][1] += 1
        if shown < o.show:
            shown += 1
            print("FAIL trace %d (%s): step %s, %s: vLLM %s, kvslot %s"
                  % (index, cfg, diff[0], diff[1], diff[2], diff[3]))
            print("  both sides, step by step: $(scripts/pyenv crosscheck) "
                  "scripts/crosscheck/vllm_plan.py build/bin/kvslot --one %d:%d:%s"
                  % (o.seed, index, cfg))
    for c in allc:
        print("  %-22s %d passed, %d failed (%d steps, %d with no rows, %d preemptions"
              % (c, *by_cfg[c][:5]), end="")
        if c in ASYNC_CONFIGS:
            print(", %d with a step in flight, %d of a finished request not yet freed"
                  % tuple(by_cfg[c][5:]), end="")
        print(")")
    print("  %d traces x %d configurations, %d x %d asynchronous, %d vLLM steps compared"
          % (o.traces, len(CONFIGS), o.async_traces, len(ASYNC_CONFIGS), steps))
    rp = sum(1 for ok, _, _ in ref if ok)
    for ok, args, rc in ref:
        if not ok and shown < o.show:
            shown += 1
            print("FAIL refusal: kvslot exit %d (want 2, vLLM refuses): kvslot %s" % (rc, shell_quote(args)))
    print("  prompts of max_model_len tokens or more: %d of %d refused by both" % (rp, len(ref)))
    passed += rp
    failed += len(ref) - rp
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
