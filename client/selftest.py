"""``tensorwire selftest --device cuda:0``: proves that one device of this install works, in a few minutes.

It starts a local cluster with ``cpu:0`` and the device and runs, each as one row of a table with a verdict:

* **device**: the device is discovered and available (its name, or the reason it is not);
* **conformance**: a sample of the conformance suite (the first and middle case of every op, every round-trip,
  replay and failure case) on the backend in this process, against numpy;
* **gradcheck**: directional gradient checks in float64 (analytical against central differences) of a kernel of
  each kind (elementwise, reductions, softmax, matmul, gathers and scatters, views, scans, the nn composites);
* **training**: six Adam steps of the digits MLP (scikit-learn's digits when it is installed, else a fixed
  synthetic set of the same shape) on the device and on ``cpu:0`` from the same weights: the losses agree;
* **large batch**: ``(ones(2048, 1024) * 2).sum()``, which the worker runs on a pool thread (``jobs.OFFLOAD_WORK``);
* **matmul 4096**: a float32 4096-cube product, 64 sampled rows checked against numpy in float64;
* **two sessions**: two sessions at once, one sending large batches (pool threads), one small ones (the worker's
  main thread), each result checked (:func:`mixed_sessions`);
* **all_reduce**: over every visible device of the kind (NCCL among CUDA GPUs), when there are two or more;
* **speed** rows against PyTorch on the same device, when PyTorch has that device: a 4096-cube float32 matmul
  (target at least 0.9x PyTorch's speed), an 8-op elementwise chain on 64M float32 elements, ``tw.compile``
  against ``torch.compile`` (at least 1.0x; both eager times noted), and a 784-512-512-10 MLP training step
  against PyTorch eager (at most 1.2x its time). Targets are for GPUs; on a CPU the rows are for information.

The command exits 1 when a correctness row fails; a speed row that misses its target fails only with
``--strict-speed``. ``--json`` prints the rows as JSON; ``--no-speed`` leaves the speed rows out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire.backends import backends
from tensorwire.backends import testing as T
from tensorwire.tensor import device_name

#: verdicts: ``ok``/``FAIL`` for correctness, ``met``/``missed`` for speed against a target, ``info`` for a speed
#: row without one, ``skip`` with the reason
FAILING = frozenset({"FAIL"})


@dataclasses.dataclass
class Row:
    """One line of the table."""

    name: str
    verdict: str
    detail: str
    seconds: float = 0.0


# -- the checks a session runs ----------------------------------------------------------------------------------------

def mixed_sessions(address: str, device: str, rounds: int = 3, token: str | None = None) -> list[str]:
    """Two sessions at once on ``device``, one sending large batches (2M elements, a 128-cube matmul: the worker
    runs those on its pool threads) and one small ones (its main thread), every result checked against numpy.
    Returns what went wrong (empty when all matched)."""
    problems: list[str] = []
    rng = np.random.default_rng(7)
    big = rng.standard_normal((2048, 1024)).astype(np.float32)
    a, b = (rng.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    small = rng.standard_normal((8, 8)).astype(np.float32)

    def large_work():
        x = tw.tensor(big, device=device)
        ta, tb = tw.tensor(a, device=device), tw.tensor(b, device=device)
        for i in range(rounds):
            got = float((x * 2 + i).sum().item())
            want = float((big.astype(np.float64) * 2 + i).sum())
            if not abs(got - want) <= 1e-4 * big.size:
                problems.append(f"large sum, round {i}: {got} != {want}")
            m = (ta @ tb).numpy()
            if not np.allclose(m, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3):
                problems.append(f"large matmul, round {i}: max error {np.abs(m - a.astype(np.float64) @ b).max()}")

    def small_work():
        y = tw.tensor(small, device=device)
        for i in range(rounds * 8):
            got = (y * i + 1).relu().numpy()
            if not np.allclose(got, np.maximum(small * i + 1, 0), rtol=1e-6, atol=1e-6):
                problems.append(f"small batch, round {i}: wrong values")

    sessions = [tw.Session(address, token) for _ in range(2)]
    errors: list[str] = []

    def run(fn, s):
        try:
            with tw.use_session(s):
                fn()
        except Exception as e:  # noqa: BLE001 - reported as a problem
            errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(fn, s), name=fn.__name__)
               for fn, s in zip((large_work, small_work), sessions)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    finally:
        for s in sessions:
            s.close()
    return problems + errors + [f"{t.name} did not finish in 600 s" for t in threads if t.is_alive()]


def _gradcheck_functions(device: str, rng) -> list[tuple[str, Callable, list]]:
    """``(name, fn, inputs)`` for one op of each kernel kind, float64 inputs on ``device``."""
    def t(*shape, positive=False, grad=True):
        a = rng.standard_normal(shape)
        if positive:
            a = np.abs(a) + 0.5
        return tw.tensor(a, dtype=tw.float64, device=device, requires_grad=grad)

    idx = tw.tensor(rng.integers(0, 5, (4, 3)), device=device)
    target = tw.tensor(rng.integers(0, 5, (4,)), device=device)
    return [
        ("mul", lambda x, y: x * y, [t(4, 5), t(4, 5)]),
        ("div", lambda x, y: x / y, [t(4, 5), t(4, 5, positive=True)]),
        ("pow", lambda x: x ** 2.5, [t(3, 4, positive=True)]),
        ("tanh", lambda x: x.tanh(), [t(4, 5)]),
        ("log", lambda x: x.log(), [t(4, 5, positive=True)]),
        ("sum", lambda x: x.sum(dim=1), [t(4, 5)]),
        ("amax", lambda x: x.amax(dim=0), [t(4, 5)]),
        ("prod", lambda x: x.prod(dim=1), [t(3, 4, positive=True)]),
        ("softmax", lambda x: F.softmax(x, dim=-1), [t(4, 5)]),
        ("logsumexp", lambda x: x.logsumexp(dim=1), [t(4, 5)]),
        ("matmul", lambda x, y: x @ y, [t(3, 4), t(4, 6)]),
        ("gather", lambda x: x.gather(1, idx), [t(4, 5)]),
        ("scatter_add", lambda x, y: x.scatter_add(1, idx, y), [t(4, 5), t(4, 3)]),
        ("cat", lambda x, y: tw.cat([x, y], dim=0), [t(2, 3), t(3, 3)]),
        ("permute", lambda x: x.permute(2, 0, 1) * 2, [t(2, 3, 4)]),
        ("cumsum", lambda x: x.cumsum(dim=1), [t(3, 5)]),
        ("layer_norm", lambda x, w, b: F.layer_norm(x, (5,), w, b), [t(4, 5), t(5), t(5)]),
        ("cross_entropy", lambda x: F.cross_entropy(x, target), [t(4, 5)]),
        ("conv2d", lambda x, w: F.conv2d(x, w, padding=1), [t(1, 2, 5, 5), t(3, 2, 3, 3)]),
        ("max_pool2d", lambda x: F.max_pool2d(x, 2), [t(1, 2, 4, 4)]),
    ]


def gradcheck(session, device: str) -> tuple[int, list[str]]:
    """``(checked, mismatches)``: every function of :func:`_gradcheck_functions`, analytical against numerical
    directional derivatives, fetched in one round trip."""
    recorded = []
    for name, fn, inputs in _gradcheck_functions(device, np.random.default_rng(0)):
        a, n = tw.autograd.gradcheck_terms(fn, inputs, eps=1e-6, directions=2)
        recorded.append((name, a, n))
    vals = session.flush(fetch=[x._id for _, a, n in recorded for x in a + n])
    bad = []
    for name, a, n in recorded:
        for x, y in zip(a, n):
            ax, ny = float(vals[x._id]), float(vals[y._id])
            if not abs(ax - ny) <= 1e-6 + 1e-5 * abs(ny):
                bad.append(f"{name}: analytical {ax:.9g} vs numerical {ny:.9g}")
    return len(recorded), bad


def _digits_data() -> tuple[np.ndarray, np.ndarray, str]:
    """Four batches of 32 of scikit-learn's digits (pixels in [0, 1]), or a fixed synthetic set of that shape."""
    try:
        # lazy: scikit-learn, an optional dependency (without it, a synthetic set of the digits' shape)
        from sklearn.datasets import load_digits
    except ImportError:
        rng = np.random.default_rng(0)
        y = rng.integers(0, 10, 128)
        x = (rng.random((128, 64)) * 0.5 + np.eye(10)[y].repeat(7, axis=1)[:, :64] * 0.5).astype(np.float32)
        return x, y.astype(np.int64), "synthetic digits-shaped data (scikit-learn is not installed)"
    d = load_digits()
    perm = np.random.default_rng(0).permutation(len(d.data))[:128]
    return (d.data[perm] / 16.0).astype(np.float32), d.target[perm].astype(np.int64), "scikit-learn's digits"


def training_losses(device: str, steps: int = 6) -> tuple[list[float], str]:
    """The losses of ``steps`` Adam steps (batch 32, seed 0) of a 64-128-10 MLP on ``device``, and the data's
    name."""
    x, y, what = _digits_data()
    tw.manual_seed(0)
    model = tw.models.MLP(64, [128], 10).to(device)
    opt = tw.optim.Adam(model.parameters(), lr=5e-3)
    out = []
    for step in range(steps):
        sl = slice(32 * (step % 4), 32 * (step % 4) + 32)
        loss = F.cross_entropy(model(tw.tensor(x[sl], device=device)), tw.tensor(y[sl], device=device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss)
    return [float(v.item()) for v in out], what


# -- speed against PyTorch on the same device -------------------------------------------------------------------------

def torch_device(device: str) -> tuple[object, str | None]:
    """``(torch, torch's name of the device)``, or ``(None, why not)`` when PyTorch cannot run on it here."""
    try:
        # lazy: PyTorch, an optional dependency (the speed rows' peer; ~1 s to import)
        import torch
    except ImportError:
        return None, "PyTorch is not installed (the speed rows' peer)"
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return torch, "cpu"
    if kind == "cuda" and torch.cuda.is_available() and int(index or 0) < torch.cuda.device_count():
        return torch, f"cuda:{index or 0}"
    return None, f"PyTorch has no {device} here"


def _sync(torch, tdev: str) -> None:
    if tdev.startswith("cuda"):
        torch.cuda.synchronize(tdev)


def interleaved(ours: Callable, peer: Callable, rounds: int = 5) -> tuple[float, float]:
    """Median seconds of ``ours`` and ``peer`` over ``rounds`` rounds, run alternately (so drift hits both)."""
    to, tp = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ours()
        to.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        peer()
        tp.append(time.perf_counter() - t0)
    return float(np.median(to)), float(np.median(tp))


class _NumpyChain(np.ndarray):
    """A numpy array with the tensor methods :func:`chain` calls (the float64 reference)."""

    def relu(self):
        return np.maximum(self, 0)

    def exp(self):
        return np.exp(self)

    def sin(self):
        return np.sin(self)

    def abs(self):
        return np.abs(self)


def chain(x):
    """8 elementwise ops: mul, add, relu, exp, sin, mul, sub, abs (one fused kernel for us)."""
    return (((x * 2 + 1).relu().exp().sin() * x) - 0.5).abs()


@dataclasses.dataclass
class Speed:
    """A speed row: our time and the peer's (ms), their ratio as the target states it, and the target."""

    name: str
    ours_ms: float
    peer_ms: float
    ratio: float
    target: str
    met: bool | None  # None: no target on this device
    note: str = ""


def _on_cpu(device: str) -> bool:
    return device.startswith("cpu")


def speed_matmul(device: str, n: int | None = None, dtype: str = "float32", repeat: int | None = None) -> Speed:
    """``n``-cube matmuls (4096 on a GPU, 1024 on a CPU), ``repeat`` queued then waited for, against PyTorch's
    (cuBLAS on a GPU)."""
    n = n or (1024 if _on_cpu(device) else 4096)
    repeat = repeat or (3 if _on_cpu(device) else 10)
    torch, tdev = torch_device(device)
    rng = np.random.default_rng(0)
    an, bn = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    a, b = tw.tensor(an, device=device), tw.tensor(bn, device=device)
    ta, tb = torch.from_numpy(an).to(tdev), torch.from_numpy(bn).to(tdev)

    def ours():
        outs = [a @ b for _ in range(repeat)]
        tw.synchronize()
        return outs

    def peer():
        outs = [ta @ tb for _ in range(repeat)]
        _sync(torch, tdev)
        return outs

    ours(), peer()
    t_ours, t_peer = interleaved(ours, peer)
    r = t_peer / t_ours
    flops = 2 * n**3 * repeat
    gpu = not _on_cpu(device)
    return Speed(f"matmul {n}^3 {dtype} vs PyTorch ({tdev}), speed", t_ours / repeat * 1e3, t_peer / repeat * 1e3, r,
                 ">= 0.9x" if gpu else "", (r >= 0.9) if gpu else None,
                 f"ours {flops / t_ours / 1e12:.1f} TFLOP/s, torch {flops / t_peer / 1e12:.1f}")


def speed_chain(device: str, n: int | None = None, repeat: int | None = None) -> Speed:
    """The 8-op chain on ``n`` float32 elements (64M on a GPU, 8M on a CPU), compiled on both sides: ``tw.compile``
    against ``torch.compile`` of the same function; ``repeat`` calls queued then waited for (as :func:`speed_matmul`
    times its products; 10 on a GPU, 3 on a CPU). Noted: our eager chain (recorded lazily, shipped at the wait),
    torch's eager, and one call with its wait. The first 4096 results of both of ours are checked against numpy in
    float64."""
    n = n or (8 << 20 if _on_cpu(device) else 64 << 20)
    repeat = repeat or (3 if _on_cpu(device) else 10)
    torch, tdev = torch_device(device)
    xn = (np.random.default_rng(0).standard_normal(n) * 0.5).astype(np.float32)
    x, tx = tw.tensor(xn, device=device), torch.from_numpy(xn).to(tdev)
    compiled, ours_compiled = torch.compile(chain), tw.compile(chain)

    def timed(fn, wait, k):
        def go():
            ys = [fn() for _ in range(k)]
            wait()
            return ys
        return go

    ours_sync, peer_sync = (lambda: tw.synchronize()), (lambda: _sync(torch, tdev))
    ours, peer = timed(lambda: ours_compiled(x), ours_sync, repeat), timed(lambda: compiled(tx), peer_sync, repeat)
    ours_eager, eager = timed(lambda: chain(x), ours_sync, repeat), timed(lambda: chain(tx), peer_sync, repeat)
    ours(), peer(), ours_eager(), eager()
    want = chain(xn[:4096].astype(np.float64).view(_NumpyChain)).view(np.ndarray)
    for got in (ours_compiled(x), chain(x)):
        np.testing.assert_allclose(got.numpy()[:4096], want, rtol=1e-4, atol=1e-4)
    t_ours, t_peer = (t / repeat for t in interleaved(ours, peer))
    t_ours_eager, t_eager = (t / repeat for t in interleaved(ours_eager, eager, rounds=3))
    one_ours, one_peer = interleaved(timed(lambda: ours_compiled(x), ours_sync, 1),
                                     timed(lambda: compiled(tx), peer_sync, 1))
    r = t_peer / t_ours
    gpu = not _on_cpu(device)
    return Speed(f"8-op chain, {n >> 20}M float32, tw.compile vs torch.compile ({tdev}), speed", t_ours * 1e3,
                 t_peer * 1e3, r, ">= 1.0x" if gpu else "", (r >= 1.0) if gpu else None,
                 f"{repeat} calls queued, then a wait; eager: ours {t_ours_eager * 1e3:.2f} ms, torch "
                 f"{t_eager * 1e3:.2f}; one call and its wait (a round trip to the worker for us): ours "
                 f"{one_ours * 1e3:.2f} ms, torch.compile {one_peer * 1e3:.2f}")


MLP_SIZES = (784, 512, 512, 10)


def speed_mlp_step(device: str, batch: int = 256, log_every: int = 10) -> Speed:
    """A 784-512-512-10 MLP training step (forward, cross-entropy, backward, Adam) against PyTorch eager from the
    same weights and data (the first steps' losses must agree); the loss is read every ``log_every`` steps."""
    torch, tdev = torch_device(device)

    def mlp(m):
        i, h1, h2, o = MLP_SIZES
        return m.Sequential(m.Linear(i, h1), m.ReLU(), m.Linear(h1, h2), m.ReLU(), m.Linear(h2, o))

    rng = np.random.default_rng(0)
    xn = rng.random((batch, MLP_SIZES[0]), dtype=np.float32)
    yn = rng.integers(0, MLP_SIZES[-1], batch)
    torch.manual_seed(0)
    tm = mlp(torch.nn).to(tdev)
    mm = mlp(tw.nn)
    mm.load_state_dict({k: tw.tensor(v.detach().cpu().numpy()) for k, v in tm.state_dict().items()})
    mm = mm.to(device)
    x, y = tw.tensor(xn, device=device), tw.tensor(yn, device=device)
    tx, ty = torch.from_numpy(xn).to(tdev), torch.from_numpy(yn).to(tdev)
    opt, topt = tw.optim.Adam(mm.parameters(), lr=1e-3), torch.optim.Adam(tm.parameters(), lr=1e-3)

    def step(F, model, o, a, b):
        loss = F.cross_entropy(model(a), b)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    first = [(step(tw.nn.functional, mm, opt, x, y).item(), step(torch.nn.functional, tm, topt, tx, ty).item())
             for _ in range(3)]
    np.testing.assert_allclose(*zip(*first), rtol=1e-3)

    def ours():
        for _ in range(log_every - 1):
            step(tw.nn.functional, mm, opt, x, y)
        return step(tw.nn.functional, mm, opt, x, y).item()

    def peer():
        for _ in range(log_every - 1):
            step(torch.nn.functional, tm, topt, tx, ty)
        return step(torch.nn.functional, tm, topt, tx, ty).item()

    ours(), peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=7)
    r = t_ours / t_peer
    gpu = not _on_cpu(device)
    return Speed(f"MLP 784-512-512-10 step, batch {batch}, vs PyTorch eager ({tdev}), time", t_ours / log_every * 1e3,
                 t_peer / log_every * 1e3, r, "<= 1.2x" if gpu else "", (r <= 1.2) if gpu else None,
                 f"ratio: our time / torch's; loss read every {log_every} steps")


SPEED_ROWS = (speed_matmul, speed_chain, speed_mlp_step)


# -- the run ----------------------------------------------------------------------------------------------------------

class SelfTest:
    """The rows for one device (see the module's docstring); :meth:`run` returns them."""

    def __init__(self, device: str, *, speed: bool = True, strict_speed: bool = False,
                 echo: Callable[[Row], None] | None = None):
        self.device = device_name(device)
        self.kind, _, index = self.device.partition(":")
        self.index = int(index or 0)
        self.speed, self.strict_speed, self.echo = speed, strict_speed, echo
        self.rows: list[Row] = []

    def _row(self, name: str, fn: Callable[[], tuple[str, str]]) -> None:
        t0 = time.perf_counter()
        try:
            verdict, detail = fn()
        except Exception as e:  # noqa: BLE001 - a failing check is a row, not the end of the run
            verdict, detail = "FAIL", f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
        row = Row(name, verdict, detail, time.perf_counter() - t0)
        self.rows.append(row)
        if self.echo:
            self.echo(row)

    def run(self) -> list[Row]:
        backend = backends().get(self.kind)
        infos = backend.devices() if backend is not None else []
        info = next((d for d in infos if d.index == self.index), None)
        if info is None or not info.available:
            why = (f"no backend {self.kind!r} is installed" if backend is None else
                   info.reason if info is not None else f"{self.device} does not exist here")
            self._row("device", lambda: ("FAIL", why))
            return self.rows
        self._row("device", lambda: ("ok", info.name or self.device))
        self._row("conformance", lambda: self._conformance(backend))
        devices = ["cpu:0"] if self.device == "cpu:0" else ["cpu:0", self.device]
        # every visible GPU of the kind; two of a CPU's (its devices are the same cores)
        same_kind = [f"{self.kind}:{d.index}" for d in infos if d.available][:2 if self.kind == "cpu" else None]
        collectives = len(same_kind) >= 2
        if collectives:
            devices += [d for d in same_kind if d not in devices]
        with tw.LocalCluster(devices=devices, collectives=collectives) as cluster:
            s = tw.connect(cluster.address)
            try:
                self._row("gradcheck", lambda: self._gradcheck(s))
                self._row("training", self._training)
                self._row("large batch", self._large_batch)
                self._row("matmul 4096", self._matmul)
                self._row("two sessions", lambda: self._two_sessions(cluster))
                self._row("all_reduce", lambda: self._all_reduce(same_kind))
                if self.speed:  # in a session of their own, which holds nothing on other devices (a sync waits
                    with tw.Session(cluster.address) as fresh, tw.use_session(fresh):  # for them all)
                        self._speed()
            finally:
                s.close()
                tw.set_session(None)
        return self.rows

    def _conformance(self, backend) -> tuple[str, str]:
        cases = T.sample_cases(T.conformance_cases())
        T.prebuild_cases(backend, cases, self.index)  # (the sample's kernels in a few modules, not one a case)
        report = T.run_conformance(backend, self.index, cases=cases)
        detail = f"{len(report.passed)} passed, {len(report.failed)} failed, {len(report.skipped)} skipped"
        if report.failed:
            name, why = next(iter(report.failed.items()))
            return "FAIL", f"{detail}; first: {name}: {why[:300]}"
        return "ok", f"{detail} (a sample of {len(cases)} cases)"

    def _gradcheck(self, s) -> tuple[str, str]:
        n, bad = gradcheck(s, self.device)
        if bad:
            return "FAIL", f"{len(bad)} of {n} differ; first: {bad[0]}"
        return "ok", f"{n} functions, 2 directions each, float64"

    def _training(self) -> tuple[str, str]:
        ours, what = training_losses(self.device)
        if self.device == "cpu:0":
            ok = ours[-1] < ours[0]
            return ("ok" if ok else "FAIL"), f"losses {ours[0]:.4f} -> {ours[-1]:.4f} ({what})"
        ref, _ = training_losses("cpu:0")
        diff = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
        ok = diff <= 1e-3 and ours[-1] < ours[0]
        return ("ok" if ok else "FAIL"), (f"losses {ours[0]:.4f} -> {ours[-1]:.4f}, at most {diff:.1e} from cpu:0's "
                                          f"({what})")

    def _large_batch(self) -> tuple[str, str]:
        got = (tw.ones((2048, 1024), device=self.device) * 2).sum().item()
        return ("ok" if got == 2 * 2048 * 1024 else "FAIL"), f"(ones(2048, 1024) * 2).sum() = {got:g}"

    def _matmul(self) -> tuple[str, str]:
        n = 4096
        rng = np.random.default_rng(1)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        got = (tw.tensor(a, device=self.device) @ tw.tensor(b, device=self.device)).numpy()
        rows = rng.choice(n, 64, replace=False)
        want = a[rows].astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(got[rows] - want).max() / np.sqrt(n))
        return ("ok" if err < 1e-3 else "FAIL"), f"64 sampled rows against numpy float64: max error {err:.1e} x sqrt(n)"

    def _two_sessions(self, cluster) -> tuple[str, str]:
        problems = mixed_sessions(cluster.address, self.device)
        if problems:
            return "FAIL", f"{len(problems)} problems; first: {problems[0]}"
        return "ok", "large batches (pool threads) and small ones (main thread) at once, all results right"

    def _all_reduce(self, devices: list[str]) -> tuple[str, str]:
        if len(devices) < 2:
            return "skip", f"one {self.kind} device visible: an all_reduce needs two"
        parts = [tw.full((1 << 20,), float(i + 1), device=d) for i, d in enumerate(devices)]
        tw.distributed.all_reduce(parts, op="sum")
        want = len(devices) * (len(devices) + 1) / 2
        ok = all(float(p.min().item()) == want == float(p.max().item()) for p in parts)
        return ("ok" if ok else "FAIL"), f"sum over {', '.join(devices)}"

    def _speed(self) -> None:
        torch, why = torch_device(self.device)
        if torch is None:
            self._row("speed", lambda: ("skip", why))
            return
        for fn in SPEED_ROWS:
            def row(fn=fn):
                sp = fn(self.device)
                verdict = "info" if sp.met is None else "met" if sp.met else "missed"
                if verdict == "missed" and self.strict_speed:
                    verdict = "FAIL"
                target = f", target {sp.target}" if sp.target else ""
                return verdict, (f"{sp.name}: ours {sp.ours_ms:.3f} ms, peer {sp.peer_ms:.3f} ms, "
                                 f"{sp.ratio:.2f}x{target}; {sp.note}")
            self._row(fn.__name__.removeprefix("speed_").replace("_", " "), row)


def table(rows: list[Row], device: str) -> str:
    """The rows as the text table ``tensorwire selftest`` prints."""
    width = max(len(r.name) for r in rows)
    lines = [f"tensorwire selftest on {device}", f"{'check':<{width}}  {'verdict':<7}  {'seconds':>7}  detail"]
    lines += [f"{r.name:<{width}}  {r.verdict:<7}  {r.seconds:>7.1f}  {r.detail}" for r in rows]
    failed = [r.name for r in rows if r.verdict in FAILING]
    total = sum(r.seconds for r in rows)
    lines.append(f"{'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'} ({total:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``tensorwire selftest``: run the rows for ``--device`` and print the table; 1 when a row failed."""
    p = argparse.ArgumentParser(prog="tensorwire selftest", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu:0", help="the device to check (default cpu:0)")
    p.add_argument("--no-speed", action="store_true", help="leave out the speed rows against PyTorch")
    p.add_argument("--strict-speed", action="store_true", help="a speed row that misses its target fails the run")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    echo = None if args.json else (lambda r: print(f"  {r.name}: {r.verdict} ({r.seconds:.1f} s)", file=sys.stderr,
                                                   flush=True))
    st = SelfTest(args.device, speed=not args.no_speed, strict_speed=args.strict_speed, echo=echo)
    rows = st.run()
    if args.json:
        print(json.dumps({"device": st.device, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))
    else:
        print(table(rows, st.device))
    return 1 if any(r.verdict in FAILING for r in rows) else 0


__all__ = ["Row", "SelfTest", "gradcheck", "main", "mixed_sessions", "speed_chain", "speed_matmul", "speed_mlp_step",
           "table", "training_losses"]
