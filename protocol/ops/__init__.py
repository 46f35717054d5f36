"""The op table: every op defined once.

Each :class:`OpDef` gives the op's name, how many inputs it takes, its shape and dtype inference
(``infer``), and either nothing (a *primitive*, which every backend must implement) or a
decomposition into other ops (a *composite*, which runs through its decomposition unless a backend
registers a native kernel for it). The client, the dispatcher, the workers and autograd all read
this table; nobody else derives shapes.

Attributes are plain msgpack values (ints, floats, bools, strings, lists). Dtypes travel by name.
A decomposition is written against a :class:`~tensorwire.protocol.graph.Builder`: ``g.op(name,
*inputs, **attrs)`` records an op and returns a value with ``.shape`` and ``.dtype``.

The table is kept by op family, one module each: :mod:`.table` (``OpDef``, the registry, inference),
:mod:`.attrs` (attribute readers), :mod:`.creation`, :mod:`.elementwise`, :mod:`.reductions`,
:mod:`.movement`, :mod:`.indexing`, :mod:`.matmul`, :mod:`.complex_ops` (complex parts and the FFTs) (the
primitives), then the composites:
:mod:`.math_composites`, :mod:`.nn` (activations, layer/RMS normalisation, linear), :mod:`.batch_norm`,
:mod:`.conv` (im2col,
convolution, pooling), :mod:`.losses` (fused cross entropy), :mod:`.optim` (fused optimizer
updates) and :mod:`.recurrent` (a recurrent layer's scan and its gradient's). Importing this package
registers all of them, in that order.

An op has one home, its family's module: an elementwise ``OpDef`` also declares the array function its numpy and MLX
kernels and its conformance reference are made from (``array_fn``), its Tensor methods (``methods``), its GPU autocast
policy (``autocast``) and its VJP rule (``vjp``), which the backends, the client and autograd read from the table.

Plugins add ops with :func:`register_op`; :func:`load_plugin_ops` (in :mod:`.plugins`) finds them
through the ``tensorwire_ops`` hook of every installed plugin.
"""

from __future__ import annotations

# the families register their ops on import, primitives first: the table's order is this order
# isort: off
from . import creation, elementwise, reductions, movement, indexing, matmul, complex_ops
from . import math_composites, nn, batch_norm, conv, losses, optim, recurrent
# isort: on
from .attrs import a_bool, a_dims, a_dtype, a_int, a_ints, a_num, a_str
from .creation import COLLECTIVES, REDUCE_OPS, split_sizes
from .elementwise import BOOL_UNARY, COMPARE, FLOAT_UNARY, SAME_UNARY, binary_dtype
from .indexing import SCATTER_REDUCES, scatter_identity
from .plugins import load_plugin_ops
from .table import OPS, InferFn, Meta, OpDef, composite, composites, get_op, infer, primitives, register_op
