"""Cases for an op without a built-in generator (a plugin's custom op, or a composite without a spec):
its ``OpDef.extra["examples"]``, checked against ``extra["reference"]`` or, without one, the native kernel
against the decomposition. An op with neither gets a case that fails (a primitive, or a composite the
backend declares native) or is skipped."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensorwire.protocol.ops import OPS, OpDef

from .. import executor as X
from .cases import Case, _Ctx, _Graph, _skip
from .inputs import _f64


def _example_cases(op: str) -> Iterator[Case]:
    """Cases for an op without a built-in generator: its ``OpDef.extra["examples"]``."""
    opdef: OpDef = OPS[op]
    examples = opdef.extra.get("examples")
    if not examples:
        if opdef.primitive:
            def missing(ctx):
                ctx.fail(f"primitive op {op!r} has no conformance generator: add one to "
                         f"tensorwire.backends.testing (or give OpDef.extra['examples'] and ['reference'])")
        else:
            def missing(ctx):
                if op in ctx.backend.native:
                    ctx.fail(f"the backend has a native kernel for composite {op!r} but the suite has no reference "
                             f"for it: give OpDef.extra['examples'] (and ['reference'])")
                _skip(f"composite {op!r} has no conformance reference (it runs through its decomposition)")
        yield Case(f"{op}[no-generator]", op, missing)
        return
    reference = opdef.extra.get("reference")
    for k, (inputs, attrs) in enumerate(examples):
        def fn(ctx, inputs=inputs, attrs=attrs):
            g = _Graph()
            n = g.op(op, *[g.input(np.asarray(x)) for x in inputs], **(attrs or {}))
            if reference is not None:
                g.ref(n, reference([_f64(x) for x in inputs], attrs or {}), scale=4.0)
                ctx.run(g)
                return
            if opdef.primitive:
                ctx.fail(f"primitive op {op!r} has examples but no OpDef.extra['reference']")
            # no reference: the native kernel must agree with the decomposition
            res = _Ctx(ctx.backend, ctx.device, True, ctx.case).run(_no_expect(g))[0]
            if isinstance(res[n], X.Fail):
                ctx.fail(f"the decomposition of {op!r} failed on example {inputs}: {res[n].err}")
            base = ctx.device.download(res[n]).reshape(_res_shape(ctx, res[n]))
            g.ref(n, _f64(base), scale=4.0)
            ctx.run(g)
        yield Case(f"{op}[example{k}]", op, fn)


def _res_shape(ctx: _Ctx, buf) -> tuple:
    return tuple(ctx.device.meta(buf)[0])


def _no_expect(g: _Graph) -> _Graph:
    return _Graph(g.inputs, g.nodes, {}, g.frames, g.dyn)



