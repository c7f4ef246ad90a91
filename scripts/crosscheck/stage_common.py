# scripts/crosscheck/stage_common.py - what the stage cross-checks share:
# running a kvtools program (and kvslot's text rows), reading its .npy streams, fetching an upstream
# release file with 'pip download --no-deps', loading definitions from such a
# file, and counting cases.  Used by scripts/crosscheck/stage_*.py.
import __future__
import ast
import io
import os
import subprocess
import sys
import tarfile
import types
import zipfile

import numpy as np

TOP = os.environ.get("KV_TOP", os.getcwd())
BIN = os.environ.get("KV_BIN", os.path.join(TOP, "build", "bin"))
CACHE = os.path.join(TOP, "build", "crosscheck")


def kv(prog, *args, stdin=None):
    """Run a kvtools program; return its stdout bytes (raise on failure)."""
    cmd = [os.path.join(BIN, prog)] + [str(a) for a in args]
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode,
                                                 r.stderr.decode(errors="replace").strip()))
    return r.stdout


def run_kvslot(kvslot, args):
    """Run kvslot (its path) with args and '-f text' output already among
    them: ({field: [row, ...]}, None), or (None, why) when it exits non-zero
    (why holds the exit status and the start of its message)."""
    p = subprocess.run([kvslot] + args, capture_output=True, text=True, timeout=30)
    if p.returncode:
        return None, "exit %d: %s" % (p.returncode, p.stderr.strip()[:200])
    rows = {}
    for line in p.stdout.splitlines():
        key, _, v = line.partition(":")
        rows.setdefault(key, []).append([int(x) for x in v.split()])
    return rows, None


def run_cases(n, gen, check, describe):
    """Run check(case) on n cases from gen(): it returns None when the case
    agrees, else what differs; an exception from upstream code fails the
    case.  The first 20 failures are printed as 'not ok I describe(case):
    why'.  Returns (passed, failed)."""
    ok = bad = 0
    for i in range(n):
        c = gen()
        try:
            err = check(c)
        except Exception as ex:  # noqa: BLE001 - any error fails the case
            err = "upstream raised %s: %s" % (type(ex).__name__, ex)
        if err:
            bad += 1
            if bad <= 20:
                print("not ok %d %s: %s" % (i, describe(c), err))
        else:
            ok += 1
    return ok, bad


def npys(data):
    """The arrays of a .npy stream (one or more .npy files back to back)."""
    f = io.BytesIO(data)
    out = []
    while f.tell() < len(data):
        out.append(np.lib.format.read_array(f, allow_pickle=False))
    return out


def same_bytes(arr, ref):
    """True when arr (numpy, from kvtools) and ref (torch or numpy) hold the
    same shape and the same bytes (bf16 compared by its bits)."""
    try:
        import torch
        if isinstance(ref, torch.Tensor):
            ref = ref.detach().contiguous()
            shape = tuple(ref.shape)
            if ref.dtype == torch.bool:
                ref = ref.to(torch.uint8)
            raw = ref.view(torch.uint8).numpy().tobytes() if ref.dim() else ref.numpy().tobytes()
            return tuple(arr.shape) == shape and arr.tobytes() == raw
    except ImportError:
        pass
    ref = np.ascontiguousarray(ref)
    return arr.shape == ref.shape and arr.tobytes() == ref.tobytes()


class Count:
    """Pass/fail tally; the first few failures are printed in full."""

    def __init__(self, name):
        self.name, self.passed, self.failed, self.shown = name, 0, 0, 0
        self.groups = {}

    def check(self, ok, group, what):
        g = self.groups.setdefault(group, [0, 0])
        if ok:
            self.passed += 1
            g[0] += 1
        else:
            self.failed += 1
            g[1] += 1
            if self.shown < 20:
                print("FAIL %s: %s" % (group, what))
                self.shown += 1
            elif self.shown == 20:
                print("(further failures not shown)")
                self.shown += 1

    def run(self, group, what, fn):
        """Check fn() is true; an exception counts as a failure."""
        try:
            ok = bool(fn())
        except Exception as e:  # noqa: BLE001 - any error fails the case
            ok = False
            what = "%s: %s: %s" % (what, type(e).__name__, e)
        self.check(ok, group, what)

    def close(self):
        for g, (p, f) in sorted(self.groups.items()):
            print("  %-44s %6d passed, %d failed" % (g, p, f))
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()
        return 0 if self.failed == 0 else 1


def pip_download(package, version):
    """The release file of package==version from the Python package index,
    downloaded once with 'pip download --no-deps' into build/crosscheck.
    An sdist is fetched without building it (its metadata step may need
    SOC_VERSION; it is given a placeholder)."""
    d = os.path.join(CACHE, "dl", "%s-%s" % (package, version))
    if not os.path.isdir(d) or not os.listdir(d):
        os.makedirs(d, exist_ok=True)
        env = dict(os.environ, SOC_VERSION=os.environ.get("SOC_VERSION", "ascend910b1"),
                   COMPILE_CUSTOM_KERNELS="0")
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
               "--no-build-isolation", "--disable-pip-version-check", "-d", d,
               "%s==%s" % (package, version)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0 or not os.listdir(d):
            os.rmdir(d) if not os.listdir(d) else None
            raise RuntimeError("pip download %s==%s failed: %s" % (package, version, r.stderr[-800:]))
    files = sorted(os.listdir(d))
    return os.path.join(d, files[0])


def release_source(package, version, member):
    """The text of one file (path inside the package, e.g.
    'vllm_ascend/attention/attention_mask.py') of a downloaded release."""
    f = pip_download(package, version)
    if f.endswith(".whl") or f.endswith(".zip"):
        with zipfile.ZipFile(f) as z:
            return z.read(member).decode()
    with tarfile.open(f) as t:
        for m in t.getmembers():
            if m.name.endswith("/" + member) and m.name.count("/") == member.count("/") + 1:
                return t.extractfile(m).read().decode()
    raise KeyError("%s not in %s" % (member, f))


def load_defs(source, names, env, filename="<release>"):
    """Execute the top-level definitions (functions, classes, assignments)
    named in names from source, unmodified except that their decorators are
    dropped, in a fresh module whose globals start as env.  Imports are not
    run: env supplies what the definitions use.  Returns the module."""
    tree = ast.parse(source, filename)
    body = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            node.decorator_list = []
            body.append(node)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in names for t in node.targets):
            body.append(node)
    found = {getattr(n, "name", None) or n.targets[0].id for n in body}
    missing = set(names) - found
    if missing:
        raise KeyError("%s: no %s" % (filename, ", ".join(sorted(missing))))
    mod = types.ModuleType(filename)
    mod.__dict__.update(env)
    # Annotations are not evaluated (they name the imports left out).
    code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, mod.__dict__)
    return mod


def has_defs(source, names):
    """True when source defines every top-level name in names."""
    tree = ast.parse(source)
    got = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return set(names) <= got


def run_mla_sparse_maybe(args, rng, lq, lk, sparse, path):
    """Run kvattn mla with args (which hold -v); when sparse, each of the lq
    queries over lk keys (causal) first picks 5 of its visible positions
    into an int32 [lq, 6] --topk-indices array saved at path.  Returns
    (output as float64, the bound -v printed, the selection or None, the
    error text or None when kvattn failed)."""
    sel = None
    if sparse:
        sel = np.full((lq, 6), -1, np.int32)
        for t in range(lq):
            pick = rng.permutation(t + lk - lq + 1)[:5]
            sel[t, : len(pick)] = pick
        np.save(path, sel)
        args = args + ["--topk-indices", path]
    r = subprocess.run([os.path.join(BIN, "kvattn")] + [str(a) for a in args], capture_output=True)
    if r.returncode:
        return None, None, sel, r.stderr.decode()
    out = npys(r.stdout)[0].astype(np.float64)
    return out, float(r.stderr.decode().split("error bound ")[1].split()[0]), sel, None
