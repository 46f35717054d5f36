"""The threads OpenBLAS runs the CPU worker's products on (``backends/cpu/blas.py``): one for a small product, the
worker's all for a large one, and the same values on either.

Each case runs in a fresh process whose OpenBLAS has 2 threads (``OPENBLAS_NUM_THREADS=2``, as a 2-thread worker's),
so neither the host's cores nor this process's BLAS settings matter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("threadpoolctl")
pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS runs at most a thread a core: one here")

SCRIPT = r"""
import json
import numpy as np
from threadpoolctl import threadpool_info
from tensorwire.backends.cpu import blas
from tensorwire.backends.cpu.kernels import KERNELS, _linear_fn
from tensorwire.backends.cpu.recurrent import _rnn_scan
from tensorwire.protocol import dtypes as D

def count():
    return [i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"][0]

rng = np.random.default_rng(0)
out = {"start": count()}
a, b = rng.standard_normal((512, 64), np.float32), rng.standard_normal((64, 192), np.float32)
KERNELS["matmul"]([a, b], {}, (512, 192), D.float32)
out["makemore"] = count()  # [512, 64] @ [64, 192]: 6.3M multiply-adds
x, w = rng.standard_normal((768, 128), np.float32), rng.standard_normal((1536, 128), np.float32)
_linear_fn(x.shape, w.shape, False)(x, w)
out["nanogpt"] = count()  # [768, 128] @ [128, 1536]: 151M
KERNELS["matmul"]([rng.standard_normal((4, 16, 16), np.float32), rng.standard_normal((4, 16, 16), np.float32)],
                  {}, (4, 16, 16), D.float32)
out["batched"] = count()  # a batch of [16, 16] @ [16, 16]: each product small
_linear_fn(x.shape, w.shape, False)(x, w)
big = rng.standard_normal((8192, 4096), np.float32)
blas.matmul(big, rng.standard_normal(4096, np.float32))
out["vector"] = count()  # [8192, 4096] @ [4096]: 33.5M, but a matrix by a vector
y2 = blas.matmul(x, w.T)
again = all(np.array_equal(y2, blas.matmul(x, w.T)) for _ in range(5))
blas._THREADS.use(1)
y1 = np.matmul(x, w.T)
exact = x.astype(np.float64) @ w.T.astype(np.float64)
bound = (np.abs(x).astype(np.float64) @ np.abs(w.T).astype(np.float64)) * 128 * 2.0 ** -24  # (K ulps of the terms)
out["same"] = bool(again and np.all(np.abs(y2 - exact) <= bound) and np.all(np.abs(y1 - exact) <= bound))
def scan(B, H):
    h = np.zeros((B, H), np.float32)
    _rnn_scan([np.zeros((5, B, 4 * H), np.float32), h, h, np.zeros((4 * H, H), np.float32),
               np.zeros(4 * H, np.float32)], {"mode": "lstm"}, None, D.float32)
    return count()

blas._THREADS.use(1)
g, d = rng.standard_normal((35, 20, 256), np.float32), rng.standard_normal((256, 1024), np.float32)
got = blas.matmul_for(g.shape, d.shape)(g, d)  # [35, 20, 256] @ [256, 1024]: ONE product of 700 rows, 183M
out["rows"] = count()
out["rows same"] = bool(np.array_equal(got, (g.reshape(700, 256) @ d).reshape(35, 20, 1024))
                        and np.array_equal(got, blas.matmul(g, d)) and np.allclose(got, np.matmul(g, d), rtol=1e-5,
                                                                                  atol=1e-4))
blas._THREADS.use(2)
out["small scan"] = scan(8, 16)  # each step's [8, 16] @ [16, 64]: 8k multiply-adds
out["scan"] = scan(32, 64)  # [32, 64] @ [64, 256]: 524k, under PARALLEL_MNK but a scan's products come back to back
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def counts() -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_worker_count_is_kept_for_large_products(counts):
    assert counts["start"] == 2
    assert counts["nanogpt"] == 2


def test_small_products_run_on_one_thread(counts):
    assert counts["makemore"] == 1
    assert counts["batched"] == 1
    assert counts["small scan"] == 1


def test_a_scans_products_split_from_openblas_own_bound(counts):
    assert counts["scan"] == 2


def test_a_product_by_a_vector_runs_on_one_thread_whatever_its_size(counts):
    assert counts["vector"] == 1


def test_a_product_repeats_its_bits_and_is_float32s_rounding_on_one_thread_or_two(counts):
    """On two threads the same bits run to run; on one or two, within float32's rounding of the float64 product
    (bit-equal on some of OpenBLAS's kernels, not on all: ``blas``'s docstring)."""
    assert counts["same"]


def test_a_stack_of_rows_by_a_matrix_is_one_product_of_all_the_rows(counts):
    """``[..., M, K] @ [K, N]`` (a language model's decoder gradient) is one product of all the rows, not one a leading
    index as numpy makes it (~3x slower): its threads are decided by the whole product's size, and the kernel and the
    plan's specialized call give the flattened product's values."""
    assert counts["rows"] == 2 and counts["rows same"]


# ------------------------------------------------------------------------- which kernels OpenBLAS runs (its width)
AVX512 = frozenset({"avx2", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})


def _lib(core: str):
    from types import SimpleNamespace

    return SimpleNamespace(architecture=core, version="0.3.31")  # (threadpoolctl's controller's two fields read)


def test_avx2_kernels_on_an_avx512_cpu_are_named_with_their_cause(monkeypatch):
    from tensorwire.backends.cpu import blas

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    said = blas._narrower(_lib("Haswell"), AVX512)
    assert "Haswell (AVX2) kernels on a CPU with AVX-512" in said and "OPENBLAS_CORETYPE=Haswell" in said
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert "its detection picked them" in blas._narrower(_lib("Zen"), AVX512)


def test_kernels_as_wide_as_the_cpu_say_nothing(monkeypatch):
    from tensorwire.backends.cpu import blas

    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    assert blas._narrower(_lib("SkylakeX"), AVX512) == ""
    assert blas._narrower(_lib("Cooperlake"), AVX512) == ""
    assert blas._narrower(_lib("Haswell"), frozenset({"avx2", "fma"})) == ""  # an AVX2 CPU: Haswell's are its best
    assert blas._narrower(_lib("Haswell"), AVX512 - {"avx512bw"}) == ""  # (Knights Landing: no BW, no SkylakeX)


def test_cpu_flags_are_read_from_the_first_processor(tmp_path):
    from tensorwire.backends.cpu import blas

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert blas.cpu_flags(str(info)) == {"fpu", "avx2", "avx512f"}
    assert blas.cpu_flags(str(tmp_path / "absent")) == frozenset()


def test_describe_names_numpys_blas():
    from tensorwire.backends.cpu import blas

    said = blas.describe()
    assert said.startswith(("OpenBLAS", "numpy's BLAS")), said
