"""kvtools.kvslot.plan's keywords given or not as kvslot plan's options
are: with chunk_cache the scheduler's options (reorder, cp_size ...) are
refused when passed at all, their default values too, and without it the
chunk cache's (chunk_context, max_chunks ...), as the program refuses
--cp-size 1 with --chunk-cache and --max-chunks 500 without; left None
they take the program's defaults."""

from kvtools import kvslot
from conftest import npy_stream, same_array, same_refusal

KEY = "0123456789abcdef0123456789abcdef"
SCHED = (("reorder", "none"), ("cp_size", 1), ("cp_rank", 0),
         ("pcp_size", 1), ("pcp_rank", 0), ("interleave", 1),
         ("cp_convention", "pcp-dcp"))
CC = (("chunk_context", "sys"), ("chunk_cache_gpu_memory_utilization", 0.15),
      ("max_chunks", 500), ("max_chunk_tokens", 4096))


def opt(key):
    return "--" + key.replace("_", "-")


def steps_equal(got, out, what):
    ref = npy_stream(out)
    flat = [v for step in got for v in step.values()]
    assert len(flat) == len(ref), what
    for a, r in zip(flat, ref):
        same_array(a, r, what)


def test_plan_keywords_given(cli, tmp_path):
    seg = tmp_path / "s.txt"
    seg.write_text("sys 0 4 %s\nquestion 4 3\n" % KEY)
    # the fields of a step's .npy stream (the evicted keys are text only)
    fields = ",".join(f for f in kvslot.CC_FIELDS if f != "chunk_evicted_keys")
    cc = dict(chunk_cache=True, segments=str(seg), max_tokens=8, block_size=4,
              max_model_len=64, fields=fields)
    cc_args = ["plan", "--chunk-cache", "--segments", str(seg),
               "--max-tokens", 8, "-B", 4, "--max-model-len", 64,
               "--fields", fields]
    sched = dict(prompt_lens=[5, 3], max_tokens=8, block_size=4,
                 max_model_len=64)
    sched_args = ["plan", "--prompt-lens", "5,3", "--max-tokens", 8, "-B", 4,
                  "--max-model-len", 64]
    cases = [(dict(cc, **{k: v}), cc_args + [opt(k), v]) for k, v in SCHED]
    cases += [(dict(sched, **{k: v}), sched_args + [opt(k), v]) for k, v in CC]
    n_fail = 0
    for kw, a in cases:
        a = [str(x) for x in a] + ["-f", "npy"]
        status, out, err = cli("kvslot", *a)
        assert status == 2 and out == b"", a
        same_refusal(lambda: list(kvslot.plan(**kw)), status, err, " ".join(a))
        n_fail += 1
    # left out, or passed as None: the program's defaults, its steps
    for kw, a, keys in ((cc, cc_args, [k for k, _ in SCHED + CC]),
                        (sched, sched_args, [k for k, _ in SCHED + CC])):
        a = [str(x) for x in a] + ["-f", "npy"]
        status, out, err = cli("kvslot", *a)
        assert status == 0, err
        steps_equal(list(kvslot.plan(**kw)), out, " ".join(a))
        steps_equal(list(kvslot.plan(**dict(kw, **{k: None for k in keys}))),
                    out, " ".join(a) + " (None)")
    # their defaults given where the plan takes them: the same steps
    for kw, a, given in ((sched, sched_args, SCHED), (cc, cc_args, CC)):
        a = [str(x) for x in a] + ["-f", "npy"]
        status, out, err = cli("kvslot", *a)
        extra = []
        for k, v in given:
            extra += [opt(k), str(v)]
        status2, out2, _ = cli("kvslot", *(a[:-2] + extra + a[-2:]))
        assert status == status2 == 0 and out == out2
        steps_equal(list(kvslot.plan(**dict(kw, **dict(given)))), out,
                    " ".join(a + extra))
    assert n_fail == len(SCHED) + len(CC)
