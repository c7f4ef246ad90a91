"""kvtools.kvslot.map where it once parted from kvslot map: a block
table file with rows of different lengths (read and checked as the
program reads it), the --dtype i32 refusals without groups (the
program's messages), and the context-parallel keywords with groups
(refused when passed, whatever their value, as the options are when
given), and the output's bound by max_mem, with groups and without."""
import os

import numpy as np

import kvtools
from kvtools import kvslot
from conftest import CASES, same_refusal, same_stream


def ragged_file(rng, path, n_rows, width, lo=0, hi=60):
    """A text table of n_rows rows of 0..width ids each (an empty line
    for an empty row); the ids as a list of lists."""
    rows = [[int(x) for x in rng.integers(lo, hi, int(rng.integers(0, width + 1)))]
            for _ in range(n_rows)]
    with open(path, "w") as f:
        for r in rows:
            f.write(" ".join(map(str, r)) + "\n")
    return rows


def opt_args(kw, names):
    """The program's options for the keywords of kw named in names
    (keyword: option), lists as n0,n1,.."""
    out = []
    for key, opt in names:
        if key in kw:
            v = kw[key]
            out += [opt, ",".join(map(str, v)) if isinstance(v, list) else v]
    return out


_MAP_OPTS = (("block_size", "-B"), ("kv_groups", "--kv-groups"),
             ("max_model_len", "--max-model-len"),
             ("scheduled", "--scheduled"), ("computed", "--computed"),
             ("cp_size", "--cp-size"), ("cp_rank", "--cp-rank"),
             ("pcp_size", "--pcp-size"), ("pcp_rank", "--pcp-rank"),
             ("interleave", "--interleave"),
             ("cp_convention", "--cp-convention"),
             ("kernel_block_size", "--kernel-block-size"),
             ("virtual_block", "--virtual-block"), ("pad_to", "--pad-to"),
             ("dtype", "--dtype"), ("fields", "--fields"),
             ("max_mem", "--max-mem"))


def map_args(kw):
    a = ["map"] + opt_args(kw, _MAP_OPTS)
    bt = kw["block_table"]
    for t in (bt if isinstance(bt, list) else [bt]):
        a += ["--block-table", t]
    if kw.get("all_ranks"):
        a.append("--all-ranks")
    return a + ["-f", "npy"]


def compare(cli, cases, what_min_ok=1, what_min_fail=1):
    """Each (keywords) case run by the program and by kvslot.map: the same
    bytes, or the same refusal with the same message (file paths are
    given alike, so messages naming a file are compared too)."""
    calls = [("kvslot",) + tuple(map(str, map_args(kw))) for kw in cases]
    n_ok = n_fail = 0
    for kw, (status, out, err) in zip(cases, cli.many(calls)):
        what = "kvslot " + " ".join(map(str, map_args(kw)))
        if status != 0:
            same_refusal(lambda: kvslot.map(**kw), status, err, what)
            n_fail += 1
        else:
            same_stream(kvslot.map(**kw), out, what)
            n_ok += 1
    assert n_ok >= what_min_ok and n_fail >= what_min_fail, (n_ok, n_fail)
    return n_ok, n_fail


def test_map_ragged_table_file(cli, tmp_path):
    """A text table whose rows differ in length: short rows padded with 0
    where no scheduled token reaches past them, refused (naming the
    request, column and line) where one does, as the program reads it:
    with and without context parallelism and kernel blocks."""
    rng = np.random.default_rng(3660)
    cases = []
    for c in range(CASES):
        B = int(rng.choice([1, 2, 4, 8]))
        n = int(rng.integers(1, 5))
        path = os.path.join(str(tmp_path), "r%d.txt" % c)
        ragged_file(rng, path, n + int(rng.integers(0, 2)), 5)
        kw = dict(block_size=B, block_table=path,
                  scheduled=[int(x) for x in rng.integers(0, 3 * B + 2, n)])
        if rng.random() < 0.5:
            kw["computed"] = [int(x) for x in rng.integers(0, 2 * B, n)]
        if rng.random() < 0.2:
            kw["cp_size"] = 2
        if rng.random() < 0.2 and B % 2 == 0:
            kw["kernel_block_size"] = B // 2
        if rng.random() < 0.2:
            kw["max_model_len"] = 64
        cases.append(kw)
    compare(cli, cases, len(cases) // 5, len(cases) // 5)


def test_map_groups_ragged_table_file(cli, tmp_path):
    """The same with KV-cache groups: each attention group's file checked
    in its group's block size; a Mamba group's state indices padded with
    0, unchecked."""
    rng = np.random.default_rng(3661)
    specs = ("full", "sliding=4,full", "mamba=65536,full")
    cases = []
    for c in range(CASES):
        spec = specs[int(rng.integers(0, len(specs)))]
        n = int(rng.integers(1, 4))
        tables = []
        for k in range(spec.count(",") + 1):
            path = os.path.join(str(tmp_path), "g%d-%d.txt" % (c, k))
            ragged_file(rng, path, n + int(rng.integers(0, 2)), 6)
            tables.append(path)
        kw = dict(kv_groups=spec, block_size=4, max_model_len=64,
                  block_table=tables,
                  scheduled=[int(x) for x in rng.integers(0, 14, n)])
        if rng.random() < 0.3:
            kw["fields"] = "slot_mapping,block_table"
        cases.append(kw)
    compare(cli, cases, len(cases) // 10, len(cases) // 10)


def test_map_i32_refusals(cli, tmp_path):
    """--dtype i32 without groups: the tables and lengths past 32
    bits refused with the program's messages (a block whose slots pass
    2^31, a table entry, a token index, a sequence length), the rest
    written as the program writes it."""
    rng = np.random.default_rng(3662)
    fields = ("slot_mapping", "block_numbers", "block_table", "token_indices",
              "positions", "seq_lens", "block_table_indices", "req_indices")
    cases = []
    for c in range(CASES):
        B = int(rng.choice([1, 4, 16]))
        n = int(rng.integers(1, 4))
        cols = int(rng.integers(1, 5))
        big = int(rng.choice([0, 2**31 // B - 2, 2**31 - 3, 2**32]))
        t = rng.integers(0, 4, (n, cols)).astype(np.int64) + \
            big * (rng.random((n, cols)) < 0.5)
        path = os.path.join(str(tmp_path), "t%d.npy" % c)
        np.save(path, t)
        kw = dict(block_size=B, block_table=path, dtype="i32",
                  scheduled=[int(x) for x in rng.integers(0, B * cols + 1, n)])
        r = rng.random()
        if r < 0.2:
            kw["computed"] = [int(x) for x in rng.integers(0, 2**31, n)]
            kw["max_model_len"] = 2**33
        elif r < 0.4:
            kw["max_model_len"] = int(rng.choice([2**30, 2**31, 2**32]))
        if rng.random() < 0.5:
            pick = rng.permutation(len(fields))[:int(rng.integers(1, 4))]
            kw["fields"] = ",".join(fields[i] for i in pick)
        cases.append(kw)
    compare(cli, cases, len(cases) // 5, len(cases) // 5)


_CP_GIVEN = (("cp_size", 1), ("cp_rank", 0), ("pcp_size", 1),
             ("pcp_rank", 0), ("interleave", 1), ("cp_convention", "pcp-dcp"),
             ("virtual_block", "physical"), ("all_ranks", True),
             ("cp_size", 2), ("interleave", 4), ("cp_convention", "dcp"))


def test_map_groups_cp_keywords_given(cli, tmp_path):
    """With groups, the context-parallel keywords are the program's
    options: each default value maps as leaving it out (None) does, DCP
    maps, and --all-ranks, PCP without MLA and DCP beside a sliding window
    are refused with the program's status and message."""
    t = os.path.join(str(tmp_path), "t.txt")
    with open(t, "w") as f:
        f.write("1 2 3 4\n5 6 7 8\n")
    base = dict(kv_groups="chunked=8,full", block_size=4, block_table=[t, t],
                scheduled=[3, 2])
    cases = [dict(base, **{key: v}) for key, v in _CP_GIVEN]
    cases += [dict(base, kernel_block_size=4), dict(base, pcp_size=2),
              dict(base, kv_groups="sliding=4,full", cp_size=2),
              dict(base, cp_size=2, cp_rank=1, interleave=2)]
    assert compare(cli, cases + [base], 1, 1) == (12, 4)
    ref = kvslot.map(**base)
    for key, v in _CP_GIVEN[:7] + ((None, None),):
        kw = dict(base, cp_size=None, cp_rank=None, interleave=None,
                  cp_convention=None, virtual_block=None, all_ranks=False)
        if key:
            kw[key] = v
        got = kvslot.map(**kw)
        assert list(got) == list(ref), key
        for k, v2 in ref.items():
            assert got[k].tobytes() == v2.tobytes(), (key, k)


def test_map_cp_keywords_defaults(cli, tmp_path):
    """Without groups the context-parallel keywords keep the program's
    defaults: passing each default (or None) maps as leaving it out."""
    t = os.path.join(str(tmp_path), "t.txt")
    with open(t, "w") as f:
        f.write("1 2 3 4\n5 6 7 8\n")
    base = dict(block_size=4, block_table=t, scheduled=[3, 6], computed=[5, 1])
    cases = [dict(base, **{key: v}) for key, v in _CP_GIVEN]
    compare(cli, cases + [base], len(cases), 0)
    ref = kvslot.map(**base)
    for key in ("cp_size", "cp_rank", "pcp_size", "pcp_rank", "interleave",
                "cp_convention", "virtual_block"):
        got = kvslot.map(**dict(base, **{key: None}))
        assert list(got) == list(ref), key
        for k, v in ref.items():
            assert got[k].tobytes() == v.tobytes(), (key, k)


def test_map_ragged_list_refused():
    """A table given as rows of different lengths in Python is refused
    (kvtools.Error), not padded."""
    try:
        kvslot.map(block_size=2, block_table=[[1, 2], [3]], scheduled=[1, 1])
    except kvtools.Error:
        return
    except ValueError as e:        # numpy's own refusal is not kvtools'
        raise AssertionError("not a kvtools.Error: %r" % e)
    raise AssertionError("a ragged list was accepted")


def test_fields_too_many(cli, tmp_path):
    """A --fields list of more names than the program's list holds (26,
    repeats included) is refused by map and plan as the programs refuse
    it; 26 are taken."""
    t = os.path.join(tmp_path, "t.txt")
    with open(t, "w") as f:
        f.write("1 2 3\n")
    for n in (26, 27):
        f_map = ",".join(["positions"] * n)
        got = cli("kvslot", "map", "-B", "4", "--block-table", t, "--scheduled",
                  "3", "--fields", f_map, "-f", "npy")
        call = lambda: kvslot.map(block_size=4, block_table=t, scheduled=[3],  # noqa
                                  fields=f_map)
        f_plan = ",".join(["step"] * n)
        pgot = cli("kvslot", "plan", "--prompt-lens", "3", "--max-tokens", "8",
                   "-B", "4", "--max-model-len", "16", "--fields", f_plan, "-f", "npy")
        pcall = lambda: kvslot.plan(prompt_lens=[3], max_tokens=8,  # noqa
                                    block_size=4, max_model_len=16, fields=f_plan)
        if n == 26:
            assert got[0] == 0 and pgot[0] == 0, (got[2], pgot[2])
            assert list(call()) == ["positions"]
            pcall()
        else:
            assert got[0] == 2 and pgot[0] == 2, (got[2], pgot[2])
            same_refusal(call, got[0], got[2], "map, 27 fields")
            same_refusal(pcall, pgot[0], pgot[2], "plan, 27 fields")


def test_max_mem_message_once(cli, tmp_path):
    """A bad max_mem is refused with the parser's message, the option named
    once, as kvmask and kvslot map print it."""
    from kvtools import kvmask
    status, out, err = cli("kvmask", "causal", "-n", "4", "--max-mem", "lots")
    assert status == 2 and err == "kvmask: --max-mem: bad size 'lots'"
    same_refusal(lambda: kvmask.causal(n=4, max_mem="lots"), status, err,
                 "kvmask --max-mem lots")
    t = os.path.join(tmp_path, "t.txt")
    with open(t, "w") as f:
        f.write("1\n")
    status, out, err = cli("kvslot", "map", "-B", "16", "--block-table", t,
                           "--scheduled", "1", "--max-mem", "lots")
    assert status == 2 and err == "kvslot map: --max-mem: bad size 'lots'"
    same_refusal(lambda: kvslot.map(block_size=16, block_table=t,
                                    scheduled=[1], max_mem="lots"),
                 status, err, "kvslot map --max-mem lots")


def test_map_output_over_max_mem(cli, tmp_path):
    """The output counted against max_mem before any of it is made, with
    groups as without (kv_map_entries, kv_map_groups_entries): random
    steps, pads, fields, dtypes, --all-ranks and limits; the same arrays
    or the same refusal as the program.  A pad of a million slots over a
    1M limit is refused by both."""
    rng = np.random.default_rng(3663)
    fields = ("slot_mapping", "block_table", "positions", "query_start_loc",
              "block_numbers", "seq_lens", "num_tokens", "token_indices")
    specs = ("sliding=4,full", "2*(sliding=8,full)", "full", "chunked=8,full",
             "2*(mamba=65536,full)")
    cases = []
    for c in range(CASES):
        B = int(rng.choice([4, 8, 16]))
        n = int(rng.integers(1, 4))
        cols = int(rng.integers(2, 6))
        sched = [int(x) for x in rng.integers(0, B * cols // 2 + 1, n)]
        kw = dict(block_size=B, scheduled=sched,
                  computed=[int(x) for x in rng.integers(0, B * cols // 2, n)])
        groups = rng.random() < 0.5
        if groups:
            kw["kv_groups"] = str(rng.choice(specs))
            ng = 1 if kw["kv_groups"] == "full" else 2
            if "mamba" in kw["kv_groups"]:
                kw["max_model_len"] = B * cols
        else:
            ng = 1
        tables = []
        for k in range(ng):
            path = os.path.join(str(tmp_path), "t%d-%d.npy" % (c, k))
            np.save(path, rng.integers(1, 60, (n, cols)).astype(np.int64))
            tables.append(path)
        kw["block_table"] = tables if groups else tables[0]
        if not groups and rng.random() < 0.2:
            kw.update(cp_size=2, all_ranks=True)
        if rng.random() < 0.7:
            kw["pad_to"] = sum(sched) + int(rng.integers(0, 3000))
        if rng.random() < 0.3:
            kw["dtype"] = "i32"
        if rng.random() < 0.4:
            pick = rng.permutation(len(fields))[:int(rng.integers(1, 5))]
            kw["fields"] = ",".join(fields[i] for i in pick)
            if "slot_mapping" not in kw["fields"]:
                kw.pop("pad_to", None)
                kw.pop("all_ranks", None)
                kw.pop("cp_size", None)
        kw["max_mem"] = str(rng.choice(["300", "1k", "4k", "16k", "64k"]))
        cases.append(kw)
    for groups in (False, True):
        kw = dict(block_size=4, scheduled=[5], pad_to=10**6, max_mem="1M")
        t = os.path.join(str(tmp_path), "big.npy")
        np.save(t, np.arange(1, 4, dtype=np.int64)[None])
        kw.update(dict(kv_groups="sliding=4,full", block_table=[t, t])
                  if groups else dict(block_table=t))
        cases.append(kw)
    n_ok, n_fail = compare(cli, cases, len(cases) // 5, len(cases) // 5)


def test_map_many_tokens_refused_before_arrays(cli, tmp_path):
    """A step of 2e7 scheduled tokens under max_mem 1M is refused, as the
    program refuses it, before the step's token arrays (1.1 GB) are made:
    in a process whose address space leaves 400 MB, with groups and
    without, the refusal and not a MemoryError or "out of memory"."""
    import subprocess
    import sys
    t = os.path.join(str(tmp_path), "t.txt")
    with open(t, "w") as f:
        f.write(" ".join(str(i + 1) for i in range(400)) + "\n")
    args = ["map", "-B", "65536", "--block-table", t, "--scheduled", "20000000",
            "--max-mem", "1M", "-f", "npy"]
    status, out, err = cli("kvslot", *args)
    assert status == 1 and out == b"" and "the output of 140000006 entries" in err, err
    code = """if 1:
        import resource, sys
        import kvtools
        from kvtools import kvslot
        vm = [int(l.split()[1]) for l in open("/proc/self/status")
              if l.startswith("VmSize:")][0] * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (400 << 20),) * 2)
        for kw in ({}, {"kv_groups": "full"}):
            try:
                kvslot.map(block_size=65536, block_table=sys.argv[1],
                           scheduled=[20000000], max_mem="1M", **kw)
            except kvtools.Error as e:
                print(e.status, e)
        """
    p = subprocess.run([sys.executable, "-c", code, t], capture_output=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr.decode()[-400:]
    assert p.stdout.decode().splitlines() == ["1 " + err] * 2
