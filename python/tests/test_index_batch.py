"""kvtools.kvattn.index over a packed batch (q_lens, kv_lens) against
kvattn index --q-lens --kv-lens byte for byte, and against one call per
request; the refusals carry the program's messages."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvattn
from conftest import CASES, same_array


def test_index_batch_equals_cli_and_requests(cli, tmp_path):
    rng = np.random.default_rng(2048)
    cases, calls = [], []
    for c in range(CASES):
        n, H, D = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.choice([4, 16]))
        causal = c % 3 != 0
        kl = [int(v) for v in rng.integers(0 if not causal else 1, 30, n)]
        ql = [int(rng.integers(0, (k if causal else 6) + 1)) for k in kl]
        if sum(ql) == 0:
            ql[0] = 1 if kl[0] or not causal else 0
        q = rng.standard_normal((sum(ql), H, D)).astype(np.float32)
        k = rng.standard_normal((sum(kl), D)).astype(np.float32)
        w = rng.uniform(-1, 1, (sum(ql), H)).astype(np.float32)
        topk = int(rng.integers(1, 12))
        kw = dict(topk=topk, no_causal=not causal, scores=True, q_lens=ql,
                  kv_lens=kl if c % 2 else None)
        if c % 2 == 0:
            k = k[:sum(ql)] if causal else k
            kl = ql
            if not causal:
                k = rng.standard_normal((sum(ql), D)).astype(np.float32)
        idx, sco = kvattn.index(q, k, w, **kw)
        p = {}
        for name, a in (("q", q), ("k", k), ("w", w)):
            p[name] = os.path.join(tmp_path, "%s%d.npy" % (name, c))
            np.save(p[name], a)
        o, s = os.path.join(tmp_path, "o%d.npy" % c), os.path.join(tmp_path, "s%d.npy" % c)
        args = ["index", "-q", p["q"], "-k", p["k"], "--weights", p["w"], "--topk", topk,
                "--q-lens", ",".join(map(str, ql)), "-o", o, "--scores", s]
        if c % 2:
            args += ["--kv-lens", ",".join(map(str, kl))]
        if not causal:
            args.append("--no-causal")
        cases.append((c, q, k, w, ql, kl, topk, causal, idx, sco, o, s))
        calls.append(("kvattn",) + tuple(args))
    for (c, q, k, w, ql, kl, topk, causal, idx, sco, o, s), (status, _, err) in \
            zip(cases, cli.many(calls)):
        assert status == 0, err
        same_array(idx, np.load(o), "case %d indices" % c)
        same_array(sco, np.load(s), "case %d scores" % c)
        q0 = k0 = 0
        for lq, lk in zip(ql, kl):
            if lq:
                i1, s1 = kvattn.index(q[q0:q0 + lq], k[k0:k0 + lk], w[q0:q0 + lq], topk=topk,
                                      no_causal=not causal, scores=True)
                same_array(idx[q0:q0 + lq], i1, "case %d, one request" % c)
                same_array(sco[q0:q0 + lq], s1, "case %d, one request's scores" % c)
            q0, k0 = q0 + lq, k0 + lk


def test_index_batch_refusals(cli, tmp_path):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((5, 2, 4)).astype(np.float32)
    k = rng.standard_normal((9, 4)).astype(np.float32)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    for name, a in (("q", q), ("k", k), ("w", w)):
        np.save(os.path.join(tmp_path, name + ".npy"), a)
    base = ["index", "-q", os.path.join(tmp_path, "q.npy"), "-k",
            os.path.join(tmp_path, "k.npy"), "--weights", os.path.join(tmp_path, "w.npy")]
    for kw, opts, status in (
            (dict(q_lens=[2, 2], kv_lens=[4, 5]), ["--q-lens", "2,2", "--kv-lens", "4,5"], 1),
            (dict(q_lens=[4, 1], kv_lens=[3, 6]), ["--q-lens", "4,1", "--kv-lens", "3,6"], 1),
            (dict(kv_lens=[9]), ["--kv-lens", "9"], 2),
            (dict(q_lens=[5], kv_lens=[4, 5]), ["--q-lens", "5", "--kv-lens", "4,5"], 2)):
        with pytest.raises(kvtools.Error) as ei:
            kvattn.index(q, k, w, **kw)
        st, out, err = cli("kvattn", *(base + opts))
        assert st == status == ei.value.status and out == b""
        assert str(ei.value) == err, (str(ei.value), err)
