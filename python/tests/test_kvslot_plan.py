"""kvtools.kvslot.plan's prefix caching (prompts, enable_prefix_caching,
salt, lora_ids, arrivals) and context parallelism (cp_size, cp_rank,
pcp_size, pcp_rank, interleave, all_ranks, cp_convention) against kvslot
plan on random cases: every step's arrays equal byte for byte, and the
same refusals with the same messages."""
import os

import numpy as np

from kvtools import kvslot
from conftest import CASES, npy_stream, same_array, same_refusal


def plan_case(rng, d, c):
    n = int(rng.integers(1, 5))
    M = int(rng.integers(8, 40))
    B = int(rng.choice([1, 2, 4]))
    kw = dict(max_tokens=int(rng.integers(1, 24)), block_size=B, max_model_len=M)
    args = ["plan", "--max-tokens", kw["max_tokens"], "-B", B, "--max-model-len", M]
    if rng.random() < 0.6:
        # prompts sharing prefixes (a few stems), so that blocks hit
        stems = [rng.integers(0, 5, int(rng.integers(1, 12))) for _ in range(2)]
        rows = []
        for _ in range(n):
            stem = stems[int(rng.integers(0, 2))]
            tail = rng.integers(0, 5, int(rng.integers(0, 10)))
            rows.append([int(x) for x in np.concatenate([stem, tail])][:M + 1])
        w = max(len(r) for r in rows)
        table = np.full((n, w), -1, np.int64)
        for i, r in enumerate(rows):
            table[i, :len(r)] = r
        if rng.random() < 0.03:
            table[0, 0] = -1                        # refused: empty or bad
        p = os.path.join(d, "p%d.npy" % c)
        np.save(p, table)
        kw["prompts"] = table if rng.random() < 0.5 else [r for r in rows]
        if table[0, 0] == -1:
            kw["prompts"] = table
        args += ["--prompts", p]
        if rng.random() < 0.85:
            kw["enable_prefix_caching"] = True
            args.append("--enable-prefix-caching")
        if rng.random() < 0.2:
            kw["salt"] = ",".join(rng.choice(["a", "b", "xy"], int(rng.choice([1, n]))))
            args += ["--salt", kw["salt"]]
        if rng.random() < 0.2:
            kw["lora_ids"] = [int(x) for x in rng.integers(0, 3, int(rng.choice([1, n])))]
            args += ["--lora-ids", ",".join(map(str, kw["lora_ids"]))]
    else:
        plens = [int(x) for x in rng.integers(1, M + 1, n)]
        kw["prompt_lens"] = plens
        args += ["--prompt-lens", ",".join(map(str, plens))]
        if rng.random() < 0.05:
            kw["enable_prefix_caching"] = True      # refused: no token ids
            args.append("--enable-prefix-caching")
    if rng.random() < 0.3:
        kw["arrivals"] = [int(x) for x in rng.integers(1 if rng.random() > 0.03 else 0, 5,
                                                       int(rng.choice([1, n])))]
        args += ["--arrivals", ",".join(map(str, kw["arrivals"]))]
    if rng.random() < 0.5:
        kw["output_lens"] = int(rng.integers(1, 6))
        args += ["--output-lens", kw["output_lens"]]
        if rng.random() < 0.5:
            kw["decode"] = True
            args.append("--decode")
    if rng.random() < 0.3:
        kw["num_blocks"] = int(rng.integers(4, 40))
        args += ["--num-blocks", kw["num_blocks"]]
    if rng.random() < 0.4:
        kw["cp_size"] = int(rng.integers(1, 4))
        kw["cp_rank"] = int(rng.integers(0, kw["cp_size"] + (1 if rng.random() < 0.05 else 0)))
        args += ["--cp-size", kw["cp_size"], "--cp-rank", kw["cp_rank"]]
        if rng.random() < 0.3:
            kw["pcp_size"] = 2
            kw["pcp_rank"] = int(rng.integers(0, 2))
            args += ["--pcp-size", 2, "--pcp-rank", kw["pcp_rank"]]
        if rng.random() < 0.3:
            kw["interleave"] = int(rng.choice([1, 2, 3]))
            args += ["--interleave", kw["interleave"]]
        if rng.random() < 0.3:
            kw["cp_convention"] = "dcp"
            args += ["--cp-convention", "dcp"]
        if rng.random() < 0.4:
            kw["all_ranks"] = True
            args.append("--all-ranks")
    if rng.random() < 0.2:
        kw["pad_to"] = kw["max_tokens"] + int(rng.integers(0, 4))
        args += ["--pad-to", kw["pad_to"]]
    if rng.random() < 0.25:
        f = ["slot_mapping", "num_cached_tokens", "shared_blocks",
             "evicted_hashes", "req_ids", "block_table", "waiting", "cp_owner"]
        pick = [f[i] for i in rng.permutation(len(f))[:int(rng.integers(1, 5))]]
        kw["fields"] = ",".join(pick)
        args += ["--fields", kw["fields"]]
    args += ["-f", "npy"]
    return kw, args


def test_plan_cache_and_cp_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(51)
    d = str(tmp_path)
    cases = [plan_case(rng, d, c) for c in range(CASES)]
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    n_ok = n_hit = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what, d)
            continue
        steps = list(kvslot.plan(**kw))
        ref = npy_stream(out)
        got = [a for st in steps for a in st.values()]
        names = [n for st in steps for n in st]
        assert len(got) == len(ref), what
        for name, a, r in zip(names, got, ref):
            same_array(a, r, what + " " + name)
            if name == "num_cached_tokens" and a.size and a.max() > 0:
                n_hit += 1
        n_ok += 1
    assert n_ok > CASES // 2
    assert n_hit > CASES // 20          # the prompts do share cached blocks


def test_plan_i32_keeps_hashes(cli, tmp_path):
    """--dtype i32 with evicted_hashes: the hashes (u64) stay int64 bits
    whatever the dtype, in the program's .npy stream and in the package;
    the other fields are int32.  The program used to write the steps
    before the first eviction and then fail, the package to refuse."""
    rows = np.random.default_rng(1).integers(0, 50, (6, 24)).astype(np.int64)
    p = os.path.join(str(tmp_path), "p.npy")
    np.save(p, rows)
    kw = dict(prompts=rows, max_tokens=32, block_size=4, max_model_len=40,
              num_blocks=14, enable_prefix_caching=True, decode=True,
              fields="step,slot_mapping,evicted_hashes")
    args = ["plan", "--prompts", p, "--max-tokens", 32, "-B", 4,
            "--max-model-len", 40, "--num-blocks", 14,
            "--enable-prefix-caching", "--decode", "--fields",
            "step,slot_mapping,evicted_hashes", "-f", "npy"]
    status, out, err = cli("kvslot", *args, "--dtype", "i32")
    assert status == 0, err
    arrays = npy_stream(out)
    steps = list(kvslot.plan(dtype="i32", **kw))
    wide = list(kvslot.plan(**kw))
    assert len(arrays) == 3 * len(steps) == 3 * len(wide)
    n_evicted = 0
    for k, (s, w) in enumerate(zip(steps, wide)):
        for j, name in enumerate(("step", "slot_mapping", "evicted_hashes")):
            a = arrays[3 * k + j]
            same_array(s[name], a, "step %d %s" % (k, name))
            want = np.int64 if name == "evicted_hashes" else np.int32
            assert a.dtype == want and s[name].dtype == want
            assert np.array_equal(a, w[name])   # the same values as i64
        n_evicted += s["evicted_hashes"].size
    assert n_evicted > 0            # the plan does evict
