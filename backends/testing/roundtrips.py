"""Host round-trip cases (upload, meta, nbytes, download and free for every dtype, bytes unchanged) and a
plan replayed with fresh inputs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol import dtypes as D

from .cases import Case, _Graph, _Ref, _skip
from .inputs import SELECTED_DTYPES, SPECIAL, _f64, _rng, _vals


def _roundtrip_cases() -> Iterator[Case]:
    for dt in D.ALL:
        def fn(ctx, dt=dt):
            if dt.is_complex and not getattr(ctx.device, "complex_values", False):
                _skip("the device has no complex kernels (Device.complex_values)")
            rng = _rng(f"roundtrip-{dt.name}")
            arrays = [_vals(rng, s, dt) if dt in SELECTED_DTYPES else rng.integers(0, 50, s).astype(dt.np)
                      for s in ((3, 4), (), (0,), (2, 0, 3), (257,))]
            if dt.is_floating_point:
                arrays.append(SPECIAL.astype(dt.np))
            for a in arrays:
                buf = ctx.upload(a)
                m = ctx.device.meta(buf)
                if (tuple(m[0]), m[1]) != (a.shape, dt):
                    ctx.fail(f"meta of an uploaded {dt.name} {list(a.shape)} array is {m}")
                if ctx.device.nbytes(buf) != a.nbytes:
                    ctx.fail(f"nbytes of a {dt.name} {list(a.shape)} buffer is {ctx.device.nbytes(buf)}, "
                             f"expected {a.nbytes}")
                back = ctx.device.download(buf)
                if not isinstance(back, np.ndarray) or back.dtype != dt.np or back.size != a.size:
                    ctx.fail(f"download of a {dt.name} {list(a.shape)} buffer gave {type(back).__name__} "
                             f"{getattr(back, 'dtype', None)} {list(getattr(back, 'shape', ()))}")
                if not back.flags.c_contiguous:
                    ctx.fail("download returned a non-C-contiguous array")
                if back.tobytes() != a.tobytes():
                    ctx.fail(f"{dt.name} {list(a.shape)}: the downloaded bytes differ from the uploaded ones")
                ctx.device.free(buf)
        yield Case(f"roundtrip[{dt.name}]", "<roundtrip>", fn)

    def fn_replay(ctx):  # a replayed plan reads its fresh inputs (a compiling backend must not cache buffers)
        rng = _rng("replay")
        a, b = _vals(rng, (2, 3), D.float32), _vals(rng, (3,), D.float32)
        g = _Graph()
        s = g.op("add", g.input(a), g.input(b))
        g.ref(s, _f64(a) + _f64(b))
        g.ref(g.op("sum", g.op("exp", s), dims=[1]), np.exp(_f64(a) + _f64(b)).sum(1))
        a2, b2 = _vals(rng, (2, 3), D.float32), _vals(rng, (3,), D.float32)
        ref2 = {0: _Ref(_f64(a2) + _f64(b2)), 2: _Ref(np.exp(_f64(a2) + _f64(b2)).sum(1))}
        ctx.run(g, repeat=[([a2, b2], {}, ref2)])
    yield Case("replay[fresh-inputs]", "<replay>", fn_replay)



