"""kvtools.kvslot.map with KV-cache groups (kv_groups, model_config,
kernel_block, one block table a group) against kvslot map on random steps:
every array, NAME.gK among them, equal byte for byte and in the program's
order, the same refusals with the same messages, and the same bytes from
four threads at once."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools
from kvtools import kvslot
from conftest import CASES, same_refusal, same_stream, TOP

CONFIGS = os.path.join(TOP, "tests", "configs")
SPECS = ("full", "sliding=4,full", "2*(sliding=8,full)", "sliding=4:8192,full",
         "chunked=8,full", "3*chunked=16,full", "2*(3*mamba=65536,full)",
         "mamba=65536,full", "mla,mla_sliding=4", "sliding=16", "mla",
         "full:2048,2*sliding=4", "mamba=65536", "indexer,mla", "nonsense=1")
MODELS = ("gemma-3-1b.json", "gpt-oss-20b.json", "llama-4-scout.json",
          "gpt2.json", "deepseek-v3.json", "none.json")
FIELDS = ("slot_mapping", "block_table", "slot_mapping.g0", "slot_mapping.g1",
          "block_table.g1", "block_table.g0", "block_numbers.g2", "positions",
          "query_start_loc", "block_offsets", "block_table_indices.g0",
          "num_reqs", "cp_owner", "token_indices", "seq_lens", "num_tokens",
          "max_query_len", "num_scheduled_tokens", "req_indices",
          "num_computed_tokens", "slot_mapping.g9", "positions.g0", "nothing")


@pytest.fixture(scope="module")
def n_groups(cli):
    """The groups of each spec and model of the pool (kvslot groups; 2
    where it refuses), so that most cases give one table a group."""
    calls = [("kvslot", "groups", "--kv-groups", s, "--max-model-len", "64",
              "-f", "json") for s in SPECS]
    calls += [("kvslot", "groups", "--model-config",
               os.path.join(CONFIGS, c), "-f", "json") for c in MODELS]
    out = {}
    for key, (st, data, _) in zip(SPECS + MODELS, cli.many(calls)):
        out[key] = json.loads(data)["num_groups"] if st == 0 else 2
    return out


def map_case(rng, c, d, n_groups):
    """A random step with groups: (keywords, the program's arguments)."""
    n = int(rng.integers(1, 4))
    B = [None, 4, 8, 16, 32][int(rng.integers(0, 5))]
    if rng.random() < 0.75:
        src = SPECS[int(rng.integers(0, len(SPECS)))]
        kw, args = dict(kv_groups=src), ["--kv-groups", src]
    else:
        src = MODELS[int(rng.integers(0, len(MODELS)))]
        kw = dict(model_config=os.path.join(CONFIGS, src))
        args = ["--model-config", kw["model_config"]]
    if rng.random() < 0.02 and "kv_groups" in kw:
        kw["model_config"] = os.path.join(CONFIGS, "gpt2.json")
        args += ["--model-config", kw["model_config"]]       # refused: both
    if B is not None:
        kw["block_size"] = B
        args += ["-B", B]
    if "mamba" in src or rng.random() < 0.3:
        kw["max_model_len"] = int(rng.choice([48, 64, 4096]))
        args += ["--max-model-len", kw["max_model_len"]]
    if rng.random() < 0.3:
        kw["kernel_block"] = int(rng.choice([1, 4, 16, 0 if rng.random() < 0.1 else 8]))
        args += ["--kernel-block", kw["kernel_block"]]
    sched = [int(x) for x in rng.integers(0, 20, n)]
    comp = [int(x) for x in rng.integers(0, 20, n)]
    kw.update(scheduled=sched, computed=comp)
    args += ["--scheduled", ",".join(map(str, sched)),
             "--computed", ",".join(map(str, comp))]
    ng = n_groups[src] + (int(rng.integers(-1, 2)) if rng.random() < 0.05 else 0)
    named = rng.random() < 0.5
    tables = {}
    big = 2**31 // 16 if rng.random() < 0.15 else 0
    for k in range(max(ng, 0)):
        if named and rng.random() < 0.03:
            continue                    # no table for group k
        cols = int(rng.integers(1, 6)) if rng.random() < 0.1 else \
            (40 // (B or 16)) + int(rng.integers(1, 3))
        t = rng.integers(0, 60, (n + int(rng.integers(0, 2)), cols)) + big
        t = t.astype(np.int32 if rng.random() < 0.3 and not big else np.int64)
        path = os.path.join(d, "t%d-%d.npy" % (c, k))
        if rng.random() < 0.1:
            path = path[:-4] + ".txt"
            np.savetxt(path, t, fmt="%d")
        else:
            np.save(path, t)
        tables[k] = path if rng.random() < 0.15 else t
        args += ["--block-table", ("g%d=" % k if named else "") + path]
    kw["block_table"] = tables if named else [tables[k] for k in sorted(tables)]
    if rng.random() < 0.2:
        kw["pad_to"] = sum(sched) + int(rng.integers(-1, 4))
        args += ["--pad-to", kw["pad_to"]]
    if rng.random() < 0.2:
        kw["dtype"] = "i32"
        args += ["--dtype", "i32"]
    if rng.random() < 0.5:
        pick = [FIELDS[i] for i in rng.permutation(len(FIELDS) - 3 + int(
            rng.random() < 0.1) * 3)[:int(rng.integers(1, 6))]]
        kw["fields"] = ",".join(pick) if rng.random() < 0.5 else pick
        args += ["--fields", ",".join(pick)]
    r = rng.random()
    if r < 0.25:
        # DCP (computed, or refused beside a sliding window), now and then
        # PCP, --all-ranks or a bad value, handed over as the program's text
        W = int(rng.choice([1, 2, 4]))
        cp = dict(cp_size=W, cp_rank=int(rng.integers(0, W + (rng.random() < 0.05))))
        if rng.random() < 0.4:
            cp["interleave"] = int(rng.choice([1, 2, 4, 3]))
        if rng.random() < 0.1:
            cp["pcp_size"] = 2
        if rng.random() < 0.1:
            cp["cp_convention"] = str(rng.choice(["dcp", "pcp-dcp", "ring"]))
        if rng.random() < 0.1:
            cp["virtual_block"] = str(rng.choice(["kernel", "physical", "x"]))
        kw.update(cp)
        for k, v in cp.items():
            args += ["--" + k.replace("_", "-"), v]
        if rng.random() < 0.05:
            kw["all_ranks"] = True
            args += ["--all-ranks"]
    elif r < 0.27:
        kw["kernel_block_size"] = 4
        args += ["--kernel-block-size", 4]
    return kw, ["map"] + args + ["-f", "npy"]


def run_cases(cli, rng, d, n_groups, count):
    cases = [map_case(rng, c, d, n_groups) for c in range(count)]
    results = cli.many([("kvslot",) + tuple(map(str, a)) for _, a in cases])
    return cases, results


def test_map_groups_equal_cli(cli, tmp_path, n_groups):
    rng = np.random.default_rng(3634)
    cases, results = run_cases(cli, rng, str(tmp_path), n_groups, CASES)
    n_ok = n_g1 = n_i32 = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            # a table file is named in the program's messages, an array not
            same_refusal(lambda: kvslot.map(**kw), status, err, what,
                         str(tmp_path))
            n_i32 += "--dtype i32" in err
            continue
        got = kvslot.map(**kw)
        same_stream(got, out, what)
        n_ok += 1
        n_g1 += any(n.endswith(".g1") for n in got)
    assert n_ok > len(cases) // 3
    assert n_g1 > len(cases) // 5          # several groups do map
    assert n_i32 > 0 or len(cases) < 200   # the int32 refusals are reached


def test_map_groups_names_equal_cli(cli, tmp_path, n_groups):
    """The keys, in order, are the names kvslot map -f text writes."""
    rng = np.random.default_rng(3635)
    cases = [map_case(rng, c, str(tmp_path), n_groups) for c in range(60)]
    results = cli.many([("kvslot",) + tuple(map(str, a[:-1])) + ("text",)
                        for _, a in cases])
    n_ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        if status != 0:
            continue
        names = []
        for line in out.decode().splitlines():
            name = line.split(":", 1)[0]
            if not names or names[-1] != name:
                names.append(name)
        assert list(kvslot.map(**kw)) == names, " ".join(map(str, args))
        n_ok += 1
    assert n_ok > 10


def test_map_groups_threads(cli, tmp_path, n_groups):
    """Four threads calling at once give the bytes of one thread."""
    rng = np.random.default_rng(3636)
    cases, results = run_cases(cli, rng, str(tmp_path), n_groups, 80)
    good = [kw for (kw, _), (st, _, _) in zip(cases, results) if st == 0]
    assert len(good) > 20

    def call(kw):
        return [(k, v.dtype.str, v.shape, v.tobytes())
                for k, v in kvslot.map(**kw).items()]

    one = [call(kw) for kw in good]
    with ThreadPoolExecutor(4) as ex:
        for _ in range(3):
            assert list(ex.map(call, good)) == one


def test_map_groups_example():
    """kvslot(1)'s example: a sliding window group beside a full one."""
    G = os.path.join(TOP, "tests", "golden", "kvslot", "map-groups")
    m = kvslot.map(kv_groups="2*(sliding=8,full)", block_size=4,
                   block_table={0: os.path.join(G, "sliding-full-bt0.txt"),
                                1: os.path.join(G, "sliding-full-bt1.txt")},
                   scheduled=[3, 5], computed=[2, 1],
                   fields="positions,slot_mapping,block_table.g1")
    assert list(m) == ["positions", "slot_mapping.g0", "slot_mapping.g1",
                       "block_table.g1"]
    assert m["slot_mapping.g1"].tolist() == [146, 147, 148, 177, 178, 179,
                                             180, 181]
    assert m["block_table.g1"].tolist() == [[9, 10], [11, 12]]


def test_map_groups_errors(cli, tmp_path):
    """Refusals of the groups, with the program's status and message."""
    t = os.path.join(str(tmp_path), "t.npy")
    np.save(t, np.arange(1, 9).reshape(2, 4))
    base = dict(kv_groups="2*(sliding=8,full)", block_size=4, scheduled=[3, 5])
    cases = [
        (dict(base, block_table=[t, t], fields="slot_mapping.g2"),
         ["--block-table", t, "--block-table", t, "--fields", "slot_mapping.g2"]),
        (dict(base, block_table={0: t}), ["--block-table", "g0=" + t]),
        (dict(base, block_table=[t]), ["--block-table", t]),
        (dict(base, block_table=[t, t], fields="positions.g0"),
         ["--block-table", t, "--block-table", t, "--fields", "positions.g0"]),
        (dict(base, block_table=[t, t], cp_size=2),
         ["--block-table", t, "--block-table", t, "--cp-size", 2]),
        (dict(kv_groups="2*(3*mamba=65536,full)", block_size=16,
              max_model_len=1024, block_table=[t] * 4, scheduled=[3, 5],
              fields="slot_mapping.g0"),
         ["--block-table", t] * 4 + ["--fields", "slot_mapping.g0"]),
        (dict(base, block_table=[t, t], scheduled=[100, 5]),
         ["--block-table", t, "--block-table", t]),
        (dict(block_size=4, block_table=t, scheduled=[1], kernel_block=4),
         ["--block-table", t, "--kernel-block", 4]),
        (dict(block_table=t, scheduled=[1]), ["--block-table", t]),
    ]
    for kw, args in cases:
        a = ["map"]
        for key in ("kv_groups", "block_size", "max_model_len"):
            if key in kw:
                a += [{"kv_groups": "--kv-groups", "block_size": "-B",
                       "max_model_len": "--max-model-len"}[key], kw[key]]
        a += args + ["--scheduled", ",".join(map(str, kw["scheduled"]))]
        status, out, err = cli("kvslot", *a)
        assert status != 0 and out == b"", a
        same_refusal(lambda: kvslot.map(**kw), status, err, " ".join(map(str, a)))
    with pytest.raises(kvtools.Error) as ei:
        kvslot.map(kv_groups="full", block_table={"g0": t}, scheduled=[1])
    assert ei.value.status == 2
