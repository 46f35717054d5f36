"""``tw.Tensor``: a handle to a tensor on a cluster device, with PyTorch's methods.

Every method records ops (nothing runs) except the ones that need a value: ``numpy()``,
``item()``, ``tolist()``, ``repr``, ``bool()``, ``__array__`` and boolean-mask indexing.

Differences from PyTorch, on purpose:

* Buffers on the cluster are immutable. In-place methods (``add_``, ``x[i] = v`` ...) record the new
  value and rebind the tensor to it; views made from a tensor (slices, ``view``, ``transpose`` ...)
  see its later in-place updates, and in-place updates through a view write back to its base, as
  in torch. ``detach()`` of a leaf shares later updates both ways (a view, as ``.data``); of a recorded result, not.
* ``empty`` returns zeros.
"""

from __future__ import annotations

import builtins
import copy
import math
import operator
from collections.abc import Sequence

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, IndexOutOfRange, ShapeError, TensorwireError
from tensorwire.protocol.graph import attrs_key as _attrs_key
from tensorwire.protocol.ops import OPS as _OPS
from tensorwire.protocol.ops import infer as _infer
from tensorwire.protocol.shapes import infer_reshape, norm_dim, numel

from . import _factories, _install
from . import autograd_engine as _autograd_engine  # (it installs itself in autograd_hooks too)
from . import indexing as _indexing
from . import views as V
from ._aliases import rebind as _rebind
from ._factories import TensorBase
from .autograd_hooks import detach as _detach
from .autograd_hooks import record as _hooks_record
from .combine import arange_like, cat, where
from .known_values import known_int_op as _known_int_op
from .known_values import rsub as _rsub
from .memos import remember, remember_again
from .printing import format_tensor
from .return_types import return_type
from .sparse_layout import strided as _strided
from .warn_once import warn_once
from .zero_grads import zero_grad_from

Max = return_type("max", ["values", "indices"])
Min = return_type("min", ["values", "indices"])
AMinMax = return_type("aminmax", ["min", "max"])
_Number = (int, float, bool, complex, np.number, np.bool_)
_INT64 = D.int64
_op_add, _op_sub, _op_mul = operator.add, operator.sub, operator.mul


class Size(tuple):
    """The shape of a tensor, a tuple printed like ``torch.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"tensorwire.Size({list(self)})"

    def numel(self) -> int:
        return numel(self)


class device:  # noqa: N801 - torch's name
    """A device name, ``device("cpu:1")`` or ``device("cpu", 1)``; compares equal to its string. As torch's, a device
    named without an index has none (``device("cpu")``: ``str`` ``"cpu"``, ``index`` None), and a tensor on the
    first CPU device reports that one (``str(x.device) == "cpu"``); it is the kind's device 0 (``device("cpu") ==
    "cpu:0"``, which torch's does not say)."""

    # (``_name``: the ``"type:index"`` string, made once: a factory given ``device=x.device`` names the device by it,
    # for every image torchvision's ``Normalize`` makes its mean and std on)
    __slots__ = ("type", "index", "_name")

    def __init__(self, type: str | device, index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            self.type, self.index, self._name = type.type, type.index, type._name
            return
        kind, _, idx = str(type).partition(":")
        self.type = kind
        self.index = int(idx) if idx else (None if index is None else int(index))
        self._name = f"{kind}:{self.index or 0}"

    def __str__(self) -> str:
        return self.type if self.index is None else self._name

    def __repr__(self) -> str:
        return f"device(type='{self.type}')" if self.index is None else \
            f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, (device, str)):
            return self._name == (other._name if type(other) is device else device(other)._name)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._name)

    # (``with tw.device("cpu:1"):``, torch's device context: ``__enter__``/``__exit__`` come from
    # ``tensorwire.functions``, beside the session's default device they set)


def cuda_device(device=None) -> str:
    """torch's ``cuda(device)`` argument as a device name: None -> ``cuda:0``, ``1`` -> ``cuda:1``."""
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    return device_name("cuda" if device is None else device)


#: ``Tensor.to``'s cast node to each dtype: its attributes and their key
_CASTS: dict = {}


def _cast_attrs(dt: D.DType) -> tuple:
    attrs = {"dtype": dt.name}
    _CASTS[dt] = got = (attrs, _attrs_key("cast", attrs))
    return got


#: ``Tensor.device``'s object of each device name
_DEVICES: dict[str, device] = {}


def device_name(d) -> str:
    """Normalise ``"cpu"``, ``"cpu:1"``, ``device(...)`` or ``1`` to ``"type:index"``."""
    if type(d) is device:  # (``device=x.device``, torchvision's ``Normalize`` for every image: no device made)
        return d._name
    if isinstance(d, int):
        return f"cpu:{d}"
    return device(d)._name


class Tensor(TensorBase):
    """A tensor living on a cluster device. Create tensors with ``tw.tensor``, ``tw.randn`` ...."""

    __slots__ = ("_s", "_id", "_shape", "dtype", "_dev", "_base", "_vsteps", "_base_version", "_version",
                 "requires_grad", "_grad", "grad_fn", "_retains_grad", "_ag", "__weakref__")
    __array_priority__ = 1000

    def _init(self, session, hid: int, shape, dtype: D.DType, dev: str) -> None:
        self._s = session
        self._id = hid
        self._shape = shape
        self.dtype = dtype
        self._dev = dev
        self._base = None
        self._vsteps = None
        self._base_version = 0
        self._version = 0
        self.requires_grad = False
        self._grad = None
        self.grad_fn = None
        self._retains_grad = False
        self._ag = None

    def _with_new_handle(self) -> Tensor:
        """A new tensor of this one's session, shape, dtype and device, holding a handle of its own that nothing
        has recorded yet (``element_writes`` swaps it in before a run of element writes)."""
        t = Tensor.__new__(Tensor)
        t._init(self._s, next(self._s._ids), self._shape, self.dtype, self._dev)
        return t

    # __init__: torch's legacy constructor, tw.Tensor(2, 3) / tw.Tensor([1., 2.]) / tw.Tensor(), installed by
    # client/legacy_types.py (the cluster makes its own tensors without calling the class: object.__new__ and _init)

    def __del__(self):
        try:
            s = self._s
        except AttributeError:  # never initialised (``Tensor(...)`` raised)
            return
        if s is not None and not s.closed:
            s._release.append(self._id)

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> Size:
        return Size(self._shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._shape)
        return self._shape[norm_dim(dim, len(self._shape))]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    ndimension = dim

    def numel(self) -> int:
        return numel(self._shape)

    nelement = numel

    @property
    def device(self) -> device:
        d = _DEVICES.get(self._dev)
        if d is None:  # (one object a device name, never changed: torchvision's Normalize reads it for every image)
            # (the first CPU device as torch's CPU device: ``device(type='cpu')``, no index)
            d = _DEVICES[self._dev] = device("cpu" if self._dev == "cpu:0" else self._dev)
        return d

    @property
    def is_cuda(self) -> bool:
        return self._dev.startswith("cuda:")

    @property
    def is_mps(self) -> bool:
        return self._dev.startswith("mps:")

    @property
    def is_cpu(self) -> bool:
        return self._dev.startswith("cpu:")

    is_sparse = False  # a dense tensor (torch's attribute; a sparse one is a tensorwire.sparse.SparseTensor)
    _sparse = False  # whether this is a SparseTensor (client/sparse.py), for the few places that take either
    is_quantized = False
    is_meta = False
    # torch's other device kinds and layouts, which a tensorwire tensor never is (programs test them)
    is_xpu = is_ipu = is_xla = is_vulkan = is_mkldnn = is_maia = is_mtia = is_nested = False

    def is_signed(self) -> bool:
        """Whether the dtype is signed (False for ``bool`` and ``uint8``, as torch)."""
        return self.dtype.is_signed

    def is_inference(self) -> bool:
        """Whether this is an inference tensor: never (``tw.inference_mode`` makes ordinary tensors)."""
        return False

    def is_pinned(self, device=None) -> bool:
        """Whether this is in pinned host memory: never (tensors live on the cluster's devices)."""
        return False

    def is_shared(self) -> bool:
        """Whether this is in shared memory (``share_memory_``): never."""
        return False

    def is_same_size(self, other) -> bool:
        """Whether ``other`` has this tensor's shape."""
        return self._shape == other._shape

    def is_nonzero(self) -> bool:
        """The truth of a one-element tensor (torch's: an error for any other number of elements)."""
        if self.numel() == 0:
            raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
        return builtins.bool(self)

    def is_complex(self) -> bool:
        """Whether the dtype is complex (``complex64``, ``complex128``)."""
        return self.dtype.is_complex

    @property
    def layout(self):
        """``tw.strided`` (a ``tw.layout``, equal to the string ``"strided"``)."""
        return _strided

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set whether autograd records operations on this tensor (floating and complex dtypes only, as torch)."""
        if requires_grad and not self.dtype.is_inexact:
            raise DTypeError("only Tensors of floating point and complex dtype can require gradients")
        self.requires_grad = bool(requires_grad)
        return self

    @property
    def is_floating_point_(self) -> bool:
        return self.dtype.is_floating_point

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    @property
    def session(self):
        return self._s

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __hash__(self) -> int:
        return id(self)

    # ------------------------------------------------------------------ recording helpers
    def _rec(self, op: str, ins: Sequence[Tensor], attrs=None) -> Tensor:
        # (3: the search for the user's line starts above this method's caller, which is always the client's: only
        # the client's functions call ``_rec``; each frame the search walks is made into a Python object)
        return _hooks_record(self._s, op, ins, attrs, self._dev, 3)

    def _operand(self, other, dtype: D.DType | None = None) -> Tensor:
        if isinstance(other, Tensor):
            return other
        if dtype is None and type(other) in _FILL_SCALARS and self.dtype.is_floating_point:
            # (a Python bool, int or float with a floating tensor: the scalar in the tensor's dtype, what the general
            # path below comes to for each, without its tests)
            return self._s.scalar(other, self.dtype, self._dev)
        if isinstance(other, _Number):
            v = other.item() if isinstance(other, (np.number, np.bool_)) else other
            sd = dtype or D.scalar_dtype(v)
            if dtype is None and isinstance(v, complex) and self.dtype.category >= 2:
                # a complex number with a float or complex tensor: in the tensor's complex dtype, as torch computes it
                return self._s.scalar(v, D.to_complex(self.dtype), self._dev)
            if dtype is None and self.dtype.is_floating_point and sd.category <= 2 and self.dtype is not sd:
                # torch computes a float tensor with a Python number in the tensor's dtype: make the scalar
                # that dtype directly (a float32 scalar would round 0.1 before a float64 op sees it)
                return self._s.scalar(v, self.dtype, self._dev)
            if dtype is None and not self._shape and sd is not self.dtype and sd.category <= self.dtype.category:
                # A Python scalar never widens a tensor of its category (torch's wrapped numbers), but as
                # a 0-d operand it would promote with a 0-d tensor: give it the tensor's dtype instead
                # (integers that do not fit wrap on the cast, as torch's do).
                if self.dtype.category == 1 and not _fits(v, self.dtype):
                    return self._s.scalar(v, sd, self._dev).to(self.dtype)
                return self._s.scalar(v, self.dtype, self._dev)
            return self._s.scalar(v, sd, self._dev)
        return _factories.from_data(self._s, other, None, self._dev)

    def _binary(self, op: str, other, reverse: bool = False) -> Tensor:
        if isinstance(other, Tensor):
            o = other
        elif type(other) in _FILL_SCALARS and self.dtype.is_floating_point:  # (_operand's first case, inline)
            dt = self.dtype
            if dt in _HALF and op in _OPMATH_BINARY and self._shape:
                # torch's kernel computes a half tensor's arithmetic with a Python number in float32, the number
                # unrounded, and rounds once: a float32 0-d operand does (a 0-d tensor does not widen the result).
                # (Comparisons round the number to the tensor's dtype first, as here; so does a 0-d tensor's op,
                # whose result a float32 operand would widen.)
                dt = D.float32
            o = self._s.scalar(other, dt, self._dev)
        else:
            o = self._operand(other)
        # (3: this frame and its caller, one of the operator methods here, are skipped in the search for the user's
        # line, see autograd_hooks.record)
        return _hooks_record(self._s, op, [o, self] if reverse else [self, o], None, self._dev, 3)

    # ------------------------------------------------------------------ values (sync points)
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The tensor's value as a numpy array (ships pending work and waits for it). As in torch, a tensor that
        requires grad raises ``RuntimeError`` (its value would leave the graph unnoticed): call
        ``t.detach().numpy()``, or ``t.numpy(force=True)``. ``.item()`` and ``.tolist()`` work on any tensor."""
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        arr = self._numpy()
        # (writable, as torch's: the array is the caller's. A value the client keeps (``known_values``), one on a
        # message's bytes or on a shared-memory file is read-only: copied, so a write changes neither the tensor
        # nor what the client knows of it; README: "a copy")
        return arr if arr.flags.writeable else arr.copy()

    def _numpy(self) -> np.ndarray:
        """The value, whether the tensor requires grad or not (the library's own reads: printing, saving...)."""
        b = self._base
        if b is not None:
            if b._version != self._base_version:  # (a view whose base changed: V.refresh's test)
                V.refresh(self)
            elif b._base is None and V.is_alias_of(self, b):  # (its root's whole value, ``x.detach()`` of a leaf:
                return b._numpy()  # read as the root, which a loop's read of its 0-d results takes along)
        arr = self._s.fetch(self)
        if self.dtype is D.bfloat16 and arr.dtype != D.bfloat16.np:
            arr = arr.view(D.bfloat16.np)
        return arr

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()  # (torch's raises for a tensor that requires grad too)
        if dtype is not None:
            return arr.astype(dtype)
        return np.array(arr) if copy else arr

    def item(self):
        s = self._s
        if s._capture is None and s._writes is None and self.dtype is not D.bfloat16:
            # (a value the client has, of a tensor up to date with its root: the look-up ``fetch`` would make first,
            # without the calls to it; a loader's ``int(self.targets[index])`` for every sample)
            b = self._base
            if b is None or b._version == self._base_version:
                v = s._known.get(self._id)
                if v is not None and v.size == 1:
                    return v.item()
        if self.numel() != 1:
            raise ValueError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._numpy().item()  # (an array of one element gives it whatever its shape: no reshape first)

    def tolist(self):
        arr = self._numpy()
        if self.dtype in D.HALF:
            arr = arr.astype(np.float32)
        return arr.tolist()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(self.item())

    def __float__(self) -> float:
        return builtins.float(self.item())

    def __int__(self) -> int:
        return builtins.int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return builtins.int(self.item())

    def __repr__(self) -> str:
        return format_tensor(self)

    def __str__(self) -> str:
        return self.__repr__()  # (a subclass's own: ``print(param)`` shows "Parameter containing:", as torch's)

    @property
    def grad(self) -> Tensor | None:
        """The gradient ``backward()`` accumulated into this tensor (None until then, or after ``zero_grad()``)."""
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        """``t.grad = g``: None, or a tensor of ``t``'s shape, dtype and device, as torch checks (an optimizer, a
        clipping or a hand-written update that assigns a wrong one fails here, at the user's line, not in the next
        ``backward()``)."""
        if value is not None:
            _check_grad(self, value)
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    def __format__(self, spec: str) -> str:
        """torch's: a 0-d tensor formats as its Python number (``f"{loss:.4f}"``, and ``f"{score}"`` gives ``675.0``,
        not ``tensor(675.)``); any other tensor as its ``str`` with an empty spec, and a spec is a ``TypeError``."""
        if not self._shape:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        s = self._s
        if s._capture is None and s._known.has(self._id):  # (a value the client has: see _iter_known)
            return self._iter_known()
        return (self[i] for i in range(self._shape[0]))

    def _iter_known(self):
        """Iteration of a tensor whose value the client has (``known_values``): ``indexing.iter_known``."""
        return _indexing.iter_known(self)

    # ------------------------------------------------------------------ conversion
    def to(self, *args, dtype=None, device=None, copy: bool = False, non_blocking: bool = False,
           memory_format=None) -> Tensor:
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(other_tensor)``, as torch
        (``memory_format`` is accepted: a tensor's layout is the worker's, always contiguous)."""
        flags = []  # torch's positional non_blocking, copy (after the device and dtype)
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a._dev, a.dtype
            elif isinstance(a, (D.DType, np.dtype)) or (isinstance(a, str) and a in D.BY_NAME):
                dtype = a
            elif isinstance(a, (builtins.bool, np.bool_)):
                flags.append(builtins.bool(a))
            elif a is not None:
                device = a
        if len(flags) > 2:
            raise TypeError(f"to() received {len(flags)} positional bools; it takes non_blocking and copy")
        if len(flags) == 2:
            copy = copy or flags[1]
        out = self
        if dtype is not None:
            dt = dtype if type(dtype) is D.DType else D.get(dtype)
            if dt is not self.dtype:
                attrs, akey = _CASTS.get(dt) or _cast_attrs(dt)
                # (its meta given: this shape, ``dt``; 2: the search for the user's line starts at this method's caller)
                out = _hooks_record(self._s, "cast", [out], dict(attrs), self._dev, 2, (akey, (self._shape, dt)))
        if device is not None:
            dev = self._s.check_device(device_name(device))
            if dev != out._dev:
                out = _hooks_record(self._s, "copy", [out], {"shape": list(out._shape), "dtype": out.dtype.name}, dev)
        if copy and out is self:
            out = self.clone()
        return out

    def float(self, memory_format=None) -> Tensor:
        return self.to(D.float32)

    def double(self, memory_format=None) -> Tensor:
        return self.to(D.float64)

    def half(self, memory_format=None) -> Tensor:
        return self.to(D.float16)

    def bfloat16(self, memory_format=None) -> Tensor:
        return self.to(D.bfloat16)

    def long(self, memory_format=None) -> Tensor:
        return self.to(D.int64)

    def int(self, memory_format=None) -> Tensor:
        return self.to(D.int32)

    def short(self, memory_format=None) -> Tensor:
        return self.to(D.int16)

    def char(self, memory_format=None) -> Tensor:
        return self.to(D.int8)

    def byte(self, memory_format=None) -> Tensor:
        return self.to(D.uint8)

    def bool(self, memory_format=None) -> Tensor:
        return self.to(D.bool_)

    def cpu(self) -> Tensor:
        """Move to ``cpu:0`` (returns self when already there)."""
        return self.to("cpu:0")

    def cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> Tensor:
        """Move to the cluster's ``cuda:N`` (``device``: an index, ``"cuda:N"`` or a ``tw.device``; default
        ``cuda:0``), as torch's ``Tensor.cuda``; a cluster without that device raises its usual error."""
        return self.to(cuda_device(device))

    def clone(self, *, memory_format=None) -> Tensor:
        return self._rec("copy", [self])

    @property
    def data(self) -> Tensor:
        """The same value outside autograd, as torch's ``.data``: it shares in-place updates both ways
        (``p.data.add_(d)`` and ``p.data.copy_(x)`` change ``p``, unrecorded and without the in-place checks on
        leaves), and it never requires grad."""
        return V.data_view(self)

    @data.setter
    def data(self, value: Tensor) -> None:
        """``t.data = x``: ``t`` now holds ``x``'s value (its shape, dtype and device too), keeping its autograd
        flags, as torch's. ``x`` a view that already holds ``t``'s whole value (``t.data`` after an in-place update:
        ``p.data -= lr * g`` assigns ``p.data`` back) changes nothing and records nothing; any other ``x`` is aliased
        lazily (no node: the ops reading ``t`` read ``x``'s value)."""
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        if V.is_alias_of(value, self):
            return
        _rebind(self, V.detached_alias(value))

    def detach(self) -> Tensor:
        """A tensor with the same value, cut from the autograd graph. Of a leaf (no ``grad_fn``: a parameter, a buffer,
        a gradient, any tensor made outside autograd) it shares in-place updates both ways, as torch's, which shares
        the storage: ``p.detach().copy_(x)`` changes ``p`` (timm's and torch's ``AveragedModel`` EMA updates,
        ``p.grad.detach().mul_(c)``), and a later update of ``p`` shows in it. Of a result of recorded ops it holds the
        value as it is now and shares no later updates: a view would keep that result, and with it the graph that made
        it, alive (a recurrent loop's ``hidden = hidden.detach()`` would keep every step's graph)."""
        if self.grad_fn is None and not self._sparse:
            return V.data_view(self)
        return _detach(self)

    def __copy__(self) -> Tensor:
        """``copy.copy(t)``: a new tensor object on the same value that shares its in-place updates both ways (torch's
        shares the storage) and keeps ``requires_grad``, a leaf. It has a handle of its own: the two objects are
        released apart (a copy of this object's fields would release the handle twice)."""
        t = self.detach() if self._sparse else self.data
        if self.requires_grad:
            t.requires_grad_()
        return t

    def __deepcopy__(self, memo: dict) -> Tensor:
        """``copy.deepcopy(t)`` of a leaf, as torch's: a new leaf holding a copy of the value, with the same
        ``requires_grad`` and a deep copy of ``.grad`` (``copy.deepcopy(model.state_dict())``, EMA weights)."""
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment")
        t = self.detach().clone()
        if self.requires_grad:
            t.requires_grad_()
        memo[id(self)] = t
        if self.grad is not None:
            t.grad = copy.deepcopy(self.grad, memo)
        return t

    def contiguous(self, memory_format=None) -> Tensor:
        """This tensor where it lies row-major in its base (:meth:`is_contiguous`), else a copy, as torch's (a view's
        ``stride()`` and ``as_strided`` follow its base's layout, so ``x.t().contiguous()`` must be a tensor of its
        own: until session 59 it was the transposed view, its strides and ``as_strided`` reads wrong)."""
        if self._base is None or V.row_major(self):
            return self
        return self.clone()

    def is_contiguous(self, memory_format=None) -> bool:
        """Whether the tensor lies row-major in its base's layout (torch's ``contiguous_format``: ``x.t()`` does not,
        ``x.t().contiguous()`` does), as :meth:`stride` reports it; the worker holds every value contiguously, so
        this changes no cost. Asked for ``channels_last`` (``channels_last_3d``), torch's answer for a row-major
        tensor: True only where the two layouts coincide (one channel, or one spatial position)."""
        name = str(memory_format).removeprefix("torch.")  # (tw.channels_last is its name; torch's prints as that)
        if self._base is not None and not V.row_major(self):
            return False
        if memory_format is None or name in ("contiguous_format", "preserve_format"):
            return True
        nd = {"channels_last": 4, "channels_last_3d": 5}.get(name)
        if nd is None or self.ndim != nd:
            return nd is None
        return self._shape[1] == 1 or numel(self._shape[2:]) == 1

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False) -> Tensor:
        t = _factories.from_data(self._s, data, dtype or self.dtype, _placed(self, device))
        return t.requires_grad_(True) if requires_grad else t

    def new_zeros(self, *size_args, size=None, dtype=None, device=None) -> Tensor:
        return _factories.full(self._s, _size(size_args, size), 0, dtype or self.dtype, _placed(self, device))

    def new_ones(self, *size_args, size=None, dtype=None, device=None) -> Tensor:
        return _factories.full(self._s, _size(size_args, size), 1, dtype or self.dtype, _placed(self, device))

    def new_full(self, size, fill_value, dtype=None, device=None) -> Tensor:
        return _factories.full(self._s, _size((size,)), fill_value, dtype or self.dtype, _placed(self, device))

    def new_empty(self, *size_args, size=None, dtype=None, device=None) -> Tensor:
        return self.new_zeros(*size_args, size=size, dtype=dtype, device=device)

    def new(self, *args, device=None) -> Tensor:
        """torch's legacy constructor on this tensor's dtype and device: ``x.new(2, 3)`` (or a ``Size``) is a new
        tensor of that size (zeros here: tensorwire has no uninitialised memory), ``x.new(data)`` one of that data
        (a list, an array or a tensor), ``x.new()`` an empty one."""
        if not args:
            return self.new_zeros(0, device=device)
        if len(args) == 1 and not isinstance(args[0], int):
            data = args[0]
            if isinstance(data, Size):  # (a plain tuple is data, as in torch: ``x.new((2, 3))`` holds 2 and 3)
                return self.new_zeros(*data, device=device)
            return self.new_tensor(data.detach() if isinstance(data, Tensor) else data, device=device)
        return self.new_zeros(*args, device=device)

    def stride(self, dim: int | None = None):
        """The strides in elements (one dim's with ``dim``), as torch reports them: row-major for a tensor that is no
        view; a view's as its steps from its root base make them (``x.t().stride()`` is ``(1, rows)``), the layout
        ``Tensor.as_strided`` reads (``views.strides``)."""
        st = V.strides(self)[0]
        if dim is None:
            return st
        return st[norm_dim(dim, len(st))]

    def storage_offset(self) -> int:
        """Where this tensor starts in its root base's row-major elements (0 for a tensor that is no view)."""
        return V.strides(self)[1]

    def data_ptr(self) -> int:
        """A number standing for the address of this tensor's first element: its root base's identity (a worker's
        memory is not addressable from here) plus its storage offset in bytes. Two tensors give the same number when
        torch's would point at the same element of one storage (``x.data_ptr() == x.data.data_ptr()``,
        ``x[1:].data_ptr() - x.data_ptr() == x.stride(0) * x.element_size()``), as scripts test for sharing."""
        root = self._base if self._base is not None else self
        return id(root) + self.storage_offset() * self.dtype.itemsize

    def get_device(self) -> int:
        """The device's index, and -1 for a CPU device, as torch's (``cpu:1`` too: torch has one CPU)."""
        dev = self.device
        return -1 if dev.type == "cpu" else dev.index

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor as ``other``'s dtype, moved to ``other``'s device when that is of another kind (torch's
        ``self.type(other.type())``: a CPU tensor ``type_as`` a CUDA one goes to CUDA); self when both match."""
        if not isinstance(other, Tensor):
            raise TypeError(f"type_as(): argument 'other' must be Tensor, not {type(other).__name__}")
        device = other.device if other.device.type != self.device.type else None
        return self.to(dtype=other.dtype, device=device)

    def pin_memory(self, device=None) -> Tensor:
        """torch pins a host tensor's pages for fast copies to a GPU. A tensorwire tensor lives on a worker, and an
        upload or a move between devices already goes through shared memory or the transport's own buffers: there
        is nothing to pin, and this returns the tensor (as torch does for one already pinned)."""
        return self

    # ------------------------------------------------------------------ operators
    # (``+``, ``-``, ``*`` of a 0-d int64 whose value the client keeps and a Python int, ``i + 8`` of a slice bound:
    # computed on the client first, ``known_values.known_int_op``; the general path when it stands aside)
    def __add__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _op_add, o)) is not None:
            return t
        return self._binary("add", o)

    def __radd__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _op_add, o)) is not None:
            return t
        return self._binary("add", o)  # (``s + t`` is torch's add(t, s): t is the graph's first input)

    def __sub__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _op_sub, o)) is not None:
            return t
        return self._binary("sub", _no_bool_sub(self, o))

    def __rsub__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _rsub, o)) is not None:
            return t
        return self._binary("sub", _no_bool_sub(self, o), True)

    def __mul__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _op_mul, o)) is not None:
            return t
        return self._binary("mul", o)

    def __rmul__(self, o):
        if type(o) is int and self.dtype is _INT64 and not self._shape \
                and (t := _known_int_op(self, _op_mul, o)) is not None:
            return t
        return self._binary("mul", o)  # (``s * t`` is torch's mul(t, s): t is the graph's first input)

    def __truediv__(self, o):
        return self._binary("div", o)

    def __rtruediv__(self, o):
        if type(o) in _FILL_SCALARS and type(o) is not builtins.bool:
            # torch's ``n / t`` is ``t.reciprocal() * n`` (two roundings, the number unrounded in the product)
            r = self.reciprocal()
            return r if o == 1 else r * o
        return self._binary("div", o, True)

    def __floordiv__(self, o):
        return self._binary("floor_divide", o)

    def __rfloordiv__(self, o):
        return self._binary("floor_divide", o, True)

    def __mod__(self, o):
        return self._binary("remainder", o)

    def __rmod__(self, o):
        return self._binary("remainder", o, True)

    def __pow__(self, o):
        return self.pow(o)

    def __rpow__(self, o):
        return self._binary("pow", o, True)

    def __matmul__(self, o):
        return self.matmul(o)

    def __rmatmul__(self, o):
        return self._operand(o).matmul(self)

    def __neg__(self):
        if self.dtype is D.bool_:
            raise DTypeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                             "to invert a mask, use the `~` or `logical_not()` operator instead.")
        return self._rec("neg", [self])

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __invert__(self):
        return self._rec("logical_not" if self.dtype is D.bool_ else "bitwise_not", [self])

    def __and__(self, o):
        return self._bitwise("and", o)

    def __rand__(self, o):
        return self._bitwise("and", o, True)

    def __or__(self, o):
        return self._bitwise("or", o)

    def __ror__(self, o):
        return self._bitwise("or", o, True)

    def __xor__(self, o):
        return self._bitwise("xor", o)

    def __rxor__(self, o):
        return self._bitwise("xor", o, True)

    def __lshift__(self, o):
        return self._binary("bitwise_left_shift", o)

    def __rlshift__(self, o):
        return self._binary("bitwise_left_shift", o, True)

    def __rshift__(self, o):
        return self._binary("bitwise_right_shift", o)

    def __rrshift__(self, o):
        return self._binary("bitwise_right_shift", o, True)

    def _bitwise(self, kind: str, o, reverse: bool = False):
        ot = self._operand(o)
        if self.dtype.is_floating_point or ot.dtype.is_floating_point:
            raise DTypeError(f"bitwise_{kind} is only supported for integer and bool tensors")
        op = f"logical_{kind}" if self.dtype is D.bool_ and ot.dtype is D.bool_ else f"bitwise_{kind}"
        return self._rec(op, [ot, self] if reverse else [self, ot])

    def __eq__(self, o):  # noqa: D105
        if o is None or o is Ellipsis or isinstance(o, (str, bytes)):
            return NotImplemented  # compares by identity, as torch's ``t == None`` is False
        return self._binary("eq", o)

    def __ne__(self, o):
        if o is None or o is Ellipsis or isinstance(o, (str, bytes)):
            return NotImplemented
        return self._binary("ne", o)

    def __lt__(self, o):
        return self._binary("lt", o)

    def __le__(self, o):
        return self._binary("le", o)

    def __gt__(self, o):
        return self._binary("gt", o)

    def __ge__(self, o):
        return self._binary("ge", o)

    eq = __eq__
    ne = __ne__
    lt = __lt__
    le = __le__
    gt = __gt__
    ge = __ge__
    less = __lt__
    greater = __gt__
    less_equal = __le__
    greater_equal = __ge__
    not_equal = __ne__

    def add(self, other, *args, alpha=1):
        if args:  # (torch's deprecated ``add(Number alpha, Tensor other)``)
            other, alpha = _alpha_first("add", (other, *args), alpha)
        if alpha == 1:
            return self + other
        t = self._scaled(other, alpha)
        return self + other * alpha if t is None else t

    def sub(self, other, *args, alpha=1):
        if args:  # (torch's deprecated ``sub(Number alpha, Tensor other)``)
            other, alpha = _alpha_first("sub", (other, *args), alpha)
        if alpha == 1:
            return self - other
        t = self._scaled(other, -alpha)
        return self - other * alpha if t is None else t

    def _scaled(self, other, alpha) -> Tensor | None:
        """``self + alpha * other`` as one node (``add_scaled``) for two tensors of one floating dtype and a Python
        float or int ``alpha`` (a hand-written update, ``p.data.add_(g, alpha=-lr)``, then records one op a
        parameter, not a mul and an add); None otherwise (the caller records the two ops, which keep torch's rules
        for integers, bools and mixed dtypes)."""
        if type(alpha) not in _SCALE_NUMBERS or not isinstance(other, Tensor) or other.dtype is not self.dtype \
                or not self.dtype.is_floating_point:
            return None
        return self._rec("add_scaled", [self, other, self._s.scalar(alpha, self.dtype, self._dev)])

    subtract = sub

    def mul(self, other):
        return self * other

    multiply = mul

    def div(self, other, *, rounding_mode: str | None = None):
        if rounding_mode is None:  # (``self / other``, one call less for a number or a plain tensor: ToTensor's, and
            # Normalize's div_; a subclass's reflected ``__rtruediv__`` is Python's to ask first)
            return self._binary("div", other) if type(other) is Tensor or not isinstance(other, Tensor) \
                else self / other
        if rounding_mode == "floor":
            return self // other
        if rounding_mode == "trunc":
            q = self / other
            return q.trunc().to(D.result_type((self.dtype, self.ndim), other if not isinstance(other, Tensor)
                                              else (other.dtype, other.ndim))) if q.dtype is not self.dtype \
                else q.trunc()
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")

    divide = div
    true_divide = __truediv__

    def floor_divide(self, other):
        return self // other

    def remainder(self, other):
        return self % other

    def fmod(self, other):
        o = self._operand(other)
        return self - (self / o).trunc().to(self.dtype) * o if not self.dtype.is_floating_point else \
            self - (self / o).trunc() * o

    def pow(self, exponent):
        if isinstance(exponent, _Number) and not isinstance(exponent, (bool, np.bool_)):
            if exponent == 2:
                return self._rec("square", [self]) if self.dtype is not D.bool_ else self._binary("pow", 2)
            if exponent == 1:
                return self._rec("copy", [self])
            if exponent == 0.5 and self.dtype.is_floating_point:
                return self.sqrt()
        return self._binary("pow", exponent)

    def float_power(self, exponent):
        """``pow`` in double precision, as torch: the result is float64 whatever the dtypes (so an integer base
        takes negative integer exponents)."""
        e = exponent.to(D.float64) if isinstance(exponent, Tensor) else exponent
        return self.to(D.float64).pow(e)

    def matmul(self, other):
        o = self._operand(other)
        if o._sparse:  # dense @ sparse (client/sparse.py)
            return o._rmatmul(self)
        return self._rec("matmul", [self, o])

    mm = matmul
    bmm = matmul

    def mv(self, v):
        return self.matmul(v)

    def dot(self, other):
        return (self * other).sum()

    def inner(self, other):
        """torch's ``inner``: the products summed over the last dims of both, shape ``self.shape[:-1] +
        other.shape[:-1]``; a plain product where either is 0-d."""
        o = self._operand(other)
        if self.ndim == 0 or o.ndim == 0:
            return self * o
        if self.shape[-1] != o.shape[-1]:
            raise ShapeError(f"inner() the last dimension must match on both input tensors but got shapes "
                             f"{list(self.shape)} and {list(o.shape)}")
        k = self.shape[-1]
        return (self.reshape(-1, k) @ o.reshape(-1, k).t()).reshape(*self.shape[:-1], *o.shape[:-1])

    def outer(self, other):
        return self.unsqueeze(-1) * other.unsqueeze(0)

    def bitwise_and(self, other):
        return self & other

    def bitwise_or(self, other):
        return self | other

    def bitwise_xor(self, other):
        return self ^ other

    def bitwise_not(self):
        return ~self

    # ------------------------------------------------------------------ math
    def exp2(self):
        return self._rec("exp2", [self])

    def log2(self):
        return self._rec("log2", [self])

    def log10(self):
        return self._rec("log10", [self])

    def rsqrt(self):
        return self._rec("rsqrt", [self])

    def sigmoid(self):
        return self._rec("sigmoid", [self])

    def relu(self):
        return self._rec("relu", [self])

    def neg(self):
        return -self

    negative = neg

    def round(self, decimals: int = 0):
        if decimals:
            f = 10.0 ** decimals
            return (self * f).round() / f
        return self._rec("round", [self])

    def frac(self):
        return self - self.trunc()

    def square(self):
        return self._rec("square", [self])

    def clamp(self, min=None, max=None):  # noqa: A002
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            out = self
            if min is not None:
                out = out.maximum(min)
            if max is not None:
                out = out.minimum(max)
            return out
        return self._rec("clamp", [self], {"min": min, "max": max})

    clip = clamp

    def clamp_min(self, min):  # noqa: A002
        return self.clamp(min=min)

    def clamp_max(self, max):  # noqa: A002
        return self.clamp(max=max)

    def isfinite(self):
        return self._rec("isfinite", [self])

    def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
        """Elementwise ``|self - other| <= atol + rtol * |other|`` (equal values, infinities included, are close;
        NaNs only with ``equal_nan``), as torch."""
        other = self._operand(other)
        if other.dtype is not self.dtype:
            raise DTypeError(f"isclose(): expected both inputs to have the same dtype, but got "
                             f"{self.dtype.name} and {other.dtype.name}")
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose(): rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
        eq = self == other
        if not self.dtype.is_inexact:
            if rtol == 0 and atol == 0:
                return eq
            a, b = self.to(D.float64), other.to(D.float64)
            return eq | ((a - b).abs() <= atol + rtol * b.abs())
        close = eq | (((self - other).abs() <= atol + rtol * other.abs()) & self.isfinite() & other.isfinite())
        if equal_nan:
            close = close | (self.isnan() & other.isnan())
        return close

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
        """Whether every element is :meth:`isclose` (a Python bool: a sync point)."""
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def equal(self, other) -> bool:
        """Whether both tensors have the same shape and elements (a Python bool: a sync point)."""
        other = self._operand(other)
        if other._shape != self._shape:
            return False
        return bool((self == other).all().item())

    def isposinf(self):
        return self.isinf() & (self > 0)

    def isneginf(self):
        return self.isinf() & (self < 0)

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
        return self._rec("nan_to_num", [self], {"nan": nan, "posinf": posinf, "neginf": neginf})

    def lerp(self, end, weight):
        return self._rec("lerp", [self, self._operand(end), self._operand(weight)])

    def where(self, condition, other):
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        v = value if isinstance(value, Tensor) else self._s.scalar(
            value.item() if isinstance(value, np.generic) else value, self.dtype, self._dev)
        return where(mask, v.to(self.dtype), self)

    def softmax(self, dim: int, dtype=None):
        x = self if dtype is None else self.to(dtype)
        # (recorded here, not by _rec: one call less, and the search for the user's line starts above this frame)
        return _hooks_record(x._s, "softmax", [x], {"dim": dim}, x._dev, 2)

    def log_softmax(self, dim: int, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return _hooks_record(x._s, "log_softmax", [x], {"dim": dim}, x._dev, 2)  # (as softmax)

    # ------------------------------------------------------------------ reductions
    def _reduce(self, op: str, dim, keepdim: bool, **extra):
        if not extra and (dim is None or type(dim) is int) and type(keepdim) is bool and self._shape:
            # (the commonest reductions, ``x.sum()``, ``x.mean(1)``: their attributes and attrs key made once; the
            # output's meta inferred here, memoised, as record would)
            got = _REDUCTIONS.get((op, dim, keepdim)) or _reduction_attrs(op, dim, keepdim)
            akey = got[1]
            return _hooks_record(self._s, op, [self], dict(got[0]), self._dev, 3,
                                 (akey, _infer(op, [(self._shape, self.dtype)], got[0], akey)))
        if isinstance(dim, (tuple, list)) and not dim:
            dim = None  # torch: an empty dim list reduces over every dim
        if not self._shape and dim is not None:  # a 0-d tensor reduces over its one implicit dim 0 (or -1)
            for d in (dim if isinstance(dim, (tuple, list)) else (dim,)):
                norm_dim(d, 1)
            dim = None
        attrs = {"dims": _dims_attr(dim), "keepdim": keepdim}
        attrs.update(extra)
        # (recorded here, not by _rec, one call less; 3: the search for the user's line starts above the caller of
        # this method's caller, as only the client's functions call it)
        return _hooks_record(self._s, op, [self], attrs, self._dev, 3)

    def sum(self, dim=None, keepdim: bool = False, *, dtype=None):
        return self._reduce("sum", dim, keepdim, **({"dtype": D.get(dtype).name} if dtype is not None else {}))

    def nansum(self, dim=None, keepdim: bool = False, *, dtype=None):
        return self.nan_to_num(0.0, posinf=math.inf, neginf=-math.inf).where(~self.isnan(), 0).sum(
            dim, keepdim, dtype=dtype) if self.dtype.is_floating_point else self.sum(dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim: bool = False, *, dtype=None):
        return self._reduce("mean", dim, keepdim, **({"dtype": D.get(dtype).name} if dtype is not None else {}))

    def prod(self, dim=None, keepdim: bool = False, *, dtype=None):
        if isinstance(dim, (tuple, list)):
            raise TypeError("prod(): dim must be an int")
        return self._reduce("prod", dim, keepdim, **({"dtype": D.get(dtype).name} if dtype is not None else {}))

    def amax(self, dim=(), keepdim: bool = False):
        return self._reduce("amax", None if dim == () else dim, keepdim)

    def amin(self, dim=(), keepdim: bool = False):
        return self._reduce("amin", None if dim == () else dim, keepdim)

    def max(self, dim=None, keepdim: bool = False):
        """``max()`` -> 0-d; ``max(dim)`` -> ``(values, indices)``; ``max(other)`` -> elementwise."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:
            return self._reduce("amax", None, False)
        return Max(self._reduce("amax", dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim=None, keepdim: bool = False):
        """``min()`` -> 0-d; ``min(dim)`` -> ``(values, indices)``; ``min(other)`` -> elementwise."""
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return self._reduce("amin", None, False)
        return Min(self._reduce("amin", dim, keepdim), self.argmin(dim, keepdim))

    def aminmax(self, *, dim=None, keepdim=False):
        return AMinMax(self.amin(dim if dim is not None else (), keepdim),
                       self.amax(dim if dim is not None else (), keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False):
        return self._rec("argmax", [self], {"dim": dim, "keepdim": keepdim})

    def argmin(self, dim: int | None = None, keepdim: bool = False):
        return self._rec("argmin", [self], {"dim": dim, "keepdim": keepdim})

    def _var_args(self, dim, unbiased, correction) -> tuple:
        """``(dim, correction)`` from torch's overloads: ``std(unbiased: bool)`` (``x.std(False)``: a bool first is
        ``unbiased``, never a dim) and ``std(dim, unbiased, keepdim, *, correction)``."""
        if isinstance(dim, (bool, np.bool_)) and unbiased is None:
            dim, unbiased = None, builtins.bool(dim)
        elif isinstance(unbiased, (int, tuple, list)) and not isinstance(unbiased, bool):
            dim, unbiased = unbiased, None
        if correction is None:
            correction = 0 if unbiased is False else 1
        return dim, correction

    def var(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        """Variance over ``dim`` (all dims by default) with Bessel's ``correction`` (1 unless ``unbiased=False``);
        ``x.var(False)`` is torch's ``var(unbiased)`` overload."""
        dim, correction = self._var_args(dim, unbiased, correction)
        return self._reduce("var", dim, keepdim, correction=correction)

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        """Standard deviation, with :meth:`var`'s arguments."""
        dim, correction = self._var_args(dim, unbiased, correction)
        return self._reduce("std", dim, keepdim, correction=correction)

    def logsumexp(self, dim, keepdim: bool = False):
        return self._reduce("logsumexp", dim, keepdim)

    def all(self, dim=None, keepdim: bool = False):
        return self._reduce("all", dim, keepdim)

    def any(self, dim=None, keepdim: bool = False):
        return self._reduce("any", dim, keepdim)

    def count_nonzero(self, dim=None):
        return (self != 0).sum(dim)

    def cumsum(self, dim: int, *, dtype=None):
        return self._rec("cumsum", [self], {"dim": dim, **({"dtype": D.get(dtype).name} if dtype else {})})

    def cumprod(self, dim: int, *, dtype=None):
        return self._rec("cumprod", [self], {"dim": dim, **({"dtype": D.get(dtype).name} if dtype else {})})

    # ------------------------------------------------------------------ shape (views)
    def _view(self, step: V.ViewStep) -> Tensor:
        out = V.mark_view(step.forward(self), self, step)
        if self._s._capture is None:  # a small parent's value, once the client has it, gives this one's
            V.derive_view(out, self, getattr(step, "on_host", None))
        return out

    def view(self, *shape):
        """The same elements in ``shape`` (one dim may be -1), sharing updates with ``self``. Where torch's strides
        could not give the view (``x.t().view(-1)``, which torch refuses) it is one still: a write through it is
        written back to its base."""
        return self._reshaped(self._shape_of(shape))

    def reshape(self, *shape):
        """``view(*shape)`` where torch's strides give that view; else a copy, as torch's (``x.t().reshape(-1)``:
        a write to it does not reach ``x``)."""
        out = self._shape_of(shape)
        if self._base is not None and not V.viewable(self, out):
            return self._reshape_copy(out)
        return self._reshaped(out)

    def _reshape_copy(self, shape: tuple) -> Tensor:
        """``reshape(shape)`` of a view torch's strides cannot reshape: a value of its own (no view)."""
        known = (V.reshape_key(shape), (shape, self.dtype))
        return _hooks_record(self._s, "reshape", [self], {"shape": list(shape)}, self._dev, 4, known)

    def _shape_of(self, shape: tuple) -> tuple:
        """The shape ``reshape(*shape)`` asks for, -1 worked out and checked (torch's errors)."""
        args = tuple(shape[0]) if len(shape) == 1 and type(shape[0]) in _SEQS else shape  # (``x.view((a, b))``)
        key = (self._shape, args)
        out = _RESHAPES.get(key) if _ints(args) else None
        if out is None:
            out = infer_reshape(self._shape, _size(shape))  # (torch's errors)
            if _ints(args):
                remember(_RESHAPES, key, out)
        return out

    def _reshaped(self, shape: tuple) -> Tensor:
        """The view ``reshape(shape)`` makes, for a ``shape`` (a tuple of ints) checked against this tensor's."""
        parts = _RESHAPE_PARTS.get(shape)
        if parts is None:
            parts = remember_again(_RESHAPE_PARTS, _RESHAPE_SEEN, shape,
                                   (V.Reshape(shape), {"shape": list(shape)}, V.reshape_key(shape)))
        return V.make_view(self, parts[0], "reshape", parts[1], (parts[2], (shape, self.dtype)))

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        key = (self._shape, start_dim, end_dim)
        out = _FLATTENS.get(key) if type(start_dim) is int and type(end_dim) is int else None
        if out is None:
            if not self._shape:
                return self.reshape(1)
            s = norm_dim(start_dim, self.ndim)
            e = norm_dim(end_dim, self.ndim)
            if s > e:
                raise ShapeError("flatten() has invalid args: start_dim cannot come after end_dim")
            out = self._shape[:s] + (numel(self._shape[s:e + 1]),) + self._shape[e + 1:]
            remember(_FLATTENS, key, out)  # (norm_dim took ints only)
        if self._base is not None and not V.viewable(self, out):  # (a copy, as reshape's)
            return self._reshape_copy(out)
        return self._reshaped(out)

    def ravel(self):
        return self.reshape(-1)

    def unflatten(self, dim: int, sizes):
        d = norm_dim(dim, self.ndim)
        sizes = tuple(sizes)
        if -1 in sizes:
            rest = numel(tuple(x for x in sizes if x != -1))
            sizes = tuple(self._shape[d] // rest if x == -1 else x for x in sizes)
        if numel(sizes) != self._shape[d]:
            raise ShapeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim "
                             f"{dim} ({self._shape[d]}) in the input tensor")
        return self.reshape(self._shape[:d] + sizes + self._shape[d + 1:])

    def squeeze(self, dim=None):
        if dim is None:
            dims = {i for i, s in enumerate(self._shape) if s == 1}
        else:
            dims = {norm_dim(d, self.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
            dims = {d for d in dims if self._shape and self._shape[d] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self._shape) if i not in dims))

    def unsqueeze(self, dim: int):
        key = (self._shape, dim)
        out = _UNSQUEEZES.get(key) if type(dim) is int else None
        if out is None:
            d = norm_dim(dim, self.ndim, allow_end=True)
            out = self._shape[:d] + (1,) + self._shape[d:]
            remember(_UNSQUEEZES, key, out)
        return self._reshaped(out)

    def permute(self, *dims):
        args = tuple(dims[0]) if len(dims) == 1 and type(dims[0]) in _SEQS else dims  # (``x.permute((0, 2, 1))``)
        key = (self._shape, self.dtype, args)
        plan = _PERMUTES.get(key) if _ints(args) else None
        if plan is None:
            plan = self._permute_plan(_size(dims))
            if _ints(args):
                remember(_PERMUTES, key, plan)
        return self._permuted(plan)

    def _permute_plan(self, dims: tuple) -> tuple:
        """``(dims, known)`` of ``permute(*dims)`` (``dims`` ints): the permutation checked and normalised, and its
        node's attrs key and output meta (``Session.record``'s ``known``); ``dims`` None for the identity (a reshape to
        the same shape, whose ``known`` :meth:`_permuted` makes). Raises torch's errors for a wrong ``dims``."""
        nd = self.ndim
        dims = tuple(norm_dim(d, nd) for d in dims)
        if len(dims) != nd or sorted(dims) != list(range(nd)):
            raise ShapeError(f"permute(): dims {list(dims)} do not match the {nd} dims of the tensor")
        if dims == tuple(range(nd)):
            return None, None
        attrs = {"dims": list(dims)}
        akey = _attrs_key("permute", attrs)
        return dims, (akey, _infer("permute", [(self._shape, self.dtype)], attrs, akey))

    def _permuted(self, plan: tuple) -> Tensor:
        """The view ``permute`` makes for a plan of :meth:`_permute_plan`."""
        dims, known = plan
        if dims is None:
            return self._reshaped(self._shape)
        return V.make_view(self, V.Permute(dims), "permute", {"dims": list(dims)}, known)

    def _transpose_plan(self, dim0: int, dim1: int) -> tuple:
        """:meth:`_permute_plan` of ``transpose(dim0, dim1)``, memoised per shape, dtype and dims when both are ints."""
        key = (self._shape, self.dtype, dim0, dim1)
        plan = _TRANSPOSES.get(key) if type(dim0) is int and type(dim1) is int else None
        if plan is None:
            if self.ndim < 2 and not self._shape:
                plan = (None, None)
            else:
                p = list(range(self.ndim))
                a, b = norm_dim(dim0, self.ndim), norm_dim(dim1, self.ndim)
                p[a], p[b] = p[b], p[a]
                plan = self._permute_plan(tuple(p))
            if type(dim0) is int and type(dim1) is int:
                remember(_TRANSPOSES, key, plan)
        return plan

    def transpose(self, dim0: int, dim1: int):
        return self._permuted(self._transpose_plan(dim0, dim1))

    swapaxes = transpose
    swapdims = transpose

    def t(self):
        if len(self._shape) > 2:
            raise ShapeError("t() expects a tensor with <= 2 dimensions")
        return self._permuted(self._transpose_plan(0, 1)) if len(self._shape) == 2 else self

    def _reshape_(self, view: Tensor, dims: tuple | None = None) -> Tensor:
        """The in-place shape methods (``unsqueeze_``, ``squeeze_``, ``t_``, ``transpose_``, ``swapdims_``): this
        tensor takes the shape of ``view``, the out-of-place method's result, as torch changes a tensor's sizes in
        place. A view stays a view of the same root (an in-place update of it shows in its base, as torch's); a
        tensor that is no view takes the value of a ``reshape`` of itself (``dims``: a ``permute`` by them), recorded
        as any op (a value the client holds stays the client's: a target's ``unsqueeze_(-1)``), where views made of
        it before then keep reading its old value (torch's would see the new strides). autograd's graph follows, and
        a leaf that requires grad refuses, as torch's."""
        if view is self:
            return self
        _autograd_engine.check_inplace(self, view)
        if self._base is None:
            new = self._rec("reshape", [self], {"shape": list(view._shape)}) if dims is None else \
                self._rec("permute", [self], {"dims": list(dims)})
            _rebind(self, new)
            _autograd_engine.after_inplace(self, new)
            return self
        for name in ("_id", "_shape", "dtype", "_dev", "_base", "_vsteps", "_base_version"):
            mine = getattr(self, name)
            setattr(self, name, getattr(view, name))
            setattr(view, name, mine)
        self._version += 1
        _autograd_engine.after_inplace(self, view)
        return self

    def unsqueeze_(self, dim: int):
        return self._reshape_(self.unsqueeze(dim))

    def squeeze_(self, dim=None):
        return self._reshape_(self.squeeze(dim))

    def t_(self):
        if len(self._shape) > 2:
            raise ShapeError("t_() expects a tensor with <= 2 dimensions")
        return self.transpose_(0, 1) if len(self._shape) == 2 else self

    def transpose_(self, dim0: int, dim1: int):
        plan = self._transpose_plan(dim0, dim1)
        return self._reshape_(self._permuted(plan), plan[0])

    swapaxes_ = transpose_
    swapdims_ = transpose_

    @property
    def T(self):  # noqa: N802
        key = (self._shape, self.dtype, "T")
        plan = _PERMUTES.get(key)
        if plan is None:
            plan = self._permute_plan(tuple(reversed(range(self.ndim))))
            remember(_PERMUTES, key, plan)
        return self._permuted(plan)

    @property
    def mT(self):  # noqa: N802
        if len(self._shape) < 2:
            raise ShapeError("tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
        return self._permuted(self._transpose_plan(-2, -1))

    def moveaxis(self, source, destination):
        src = [norm_dim(s, self.ndim) for s in (source if isinstance(source, (list, tuple)) else [source])]
        dst = [norm_dim(s, self.ndim) for s in (destination if isinstance(destination, (list, tuple))
                                                 else [destination])]
        order = [i for i in range(self.ndim) if i not in src]
        for d, s in sorted(zip(dst, src)):
            order.insert(d, s)
        return self.permute(*order)

    movedim = moveaxis

    def expand(self, *sizes):
        args = tuple(sizes[0]) if len(sizes) == 1 and type(sizes[0]) in _SEQS else sizes  # (``x.expand(t.shape)``)
        key = (self._shape, self.dtype, args)
        known = _EXPANDS.get(key) if _ints(args) else None
        if known is None:
            sizes = _size(sizes)
            attrs = {"shape": list(sizes)}
            akey = _attrs_key("expand", attrs)
            try:
                known = (akey, _infer("expand", [(self._shape, self.dtype)], attrs, akey))
            except TensorwireError:  # (a wrong size: the general path records it, and inference says what is wrong)
                return self._view(V.Expand(sizes))
            if _ints(args):
                remember(_EXPANDS, key, known)
        else:
            sizes = args
        return V.make_view(self, V.Expand(sizes), "expand", {"shape": list(sizes)}, known)

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, shape):
        return self.expand(*_size((shape,)))

    def repeat(self, *sizes):
        sizes = _size(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError("Number of dimensions of repeat dims can not be smaller than number of dimensions "
                             "of tensor")
        shape = (1,) * (len(sizes) - self.ndim) + self._shape
        inter = []
        big = []
        for r, s in zip(sizes, shape):
            inter += [1, s]
            big += [r, s]
        return self.reshape(inter).expand(*big).reshape(tuple(r * s for r, s in zip(sizes, shape))).clone()

    def tile(self, *dims):
        dims = _size(dims)
        if len(dims) < self.ndim:
            dims = (1,) * (self.ndim - len(dims)) + tuple(dims)
        return self.repeat(*dims)

    def flip(self, *dims, **kwargs):
        if "dims" in kwargs:  # torch's keyword form, flip(dims=(0, 1))
            if dims:
                raise TypeError("flip() got multiple values for argument 'dims'")
            dims = (kwargs.pop("dims"),)
        if kwargs:
            raise TypeError(f"flip() got an unexpected keyword argument {next(iter(kwargs))!r}")
        dims = _size(dims)
        return self._rec("flip", [self], {"dims": [norm_dim(d, self.ndim) for d in dims]})

    def fliplr(self):
        return self.flip(1)

    def flipud(self):
        return self.flip(0)

    def roll(self, shifts, dims=None):
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self._shape)
        shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = dims if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise ShapeError("roll: shifts and dims must have the same length")
        out = self
        for sh, d in zip(shifts, dims):
            d = norm_dim(d, self.ndim)
            n = self._shape[d]
            if n == 0:
                continue
            k = sh % n
            if k:
                out = cat([out.narrow(d, n - k, k), out.narrow(d, 0, n - k)], d)
        return out

    def narrow(self, dim: int, start: int, length: int):
        d = norm_dim(dim, self.ndim)
        n = self._shape[d]
        if isinstance(start, Tensor):
            start = int(start)
        if start < 0:
            start += n
        if not (0 <= start <= n and 0 <= length and start + length <= n):
            raise IndexOutOfRange(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
        key = [slice(None)] * self.ndim
        key[d] = slice(start, start + length)
        return self[tuple(key)]

    def select(self, dim: int, index: int):
        d = norm_dim(dim, self.ndim)
        key = [slice(None)] * self.ndim
        key[d] = index
        return self[tuple(key)]

    def split(self, split_size, dim: int = 0):
        """Views of this tensor cut along ``dim``: ``split_size`` elements each (an int; the last one shorter), or
        pieces of the sizes ``split_size`` lists (torch's parameter name; ``tw.split`` calls it
        ``split_size_or_sections``)."""
        d = norm_dim(dim, self.ndim)
        n = self._shape[d]
        if isinstance(split_size, int):
            step = split_size
            if step <= 0:
                raise ValueError("split_size must be positive")
            sizes = [min(step, n - i) for i in range(0, n, step)] or [0]
        else:
            sizes = list(split_size)
            if sum(sizes) != n:
                raise ShapeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's "
                                 f"size at dimension {dim}), but got split_sizes={sizes}")
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(d, start, s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0):
        n = self._shape[norm_dim(dim, self.ndim)]
        return self.split(max(1, -(-n // chunks)), dim)

    def tensor_split(self, sections, dim: int = 0):
        if isinstance(sections, Tensor):  # a 0-d tensor is a count, a 1-D one the indices (read: a sync point)
            sections = int(sections.item()) if sections.ndim == 0 else [int(v) for v in sections.tolist()]
        d = norm_dim(dim, self.ndim)
        n = self._shape[d]
        if isinstance(sections, int):
            q, r = divmod(n, sections)
            sizes = [q + 1] * r + [q] * (sections - r)
        else:
            bounds = [0, *sections, n]
            sizes = [max(0, b - a) for a, b in zip(bounds, bounds[1:])]
        return self.split(sizes, d)

    def unbind(self, dim: int = 0):
        d = norm_dim(dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self._shape[d]))

    def tril(self, diagonal: int = 0):
        return self._rec("tril", [self], {"diagonal": diagonal})

    def triu(self, diagonal: int = 0):
        return self._rec("triu", [self], {"diagonal": diagonal})

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The ``offset`` diagonal of the (dim1, dim2) planes, as the last dim: a view, as torch's (writes through
        it reach ``self``; its stride is ``cols + 1``). Made of the view steps that already exist: the two dims moved
        last, the planes flattened, every ``cols + 1``-th element taken from the first."""
        nd = self.ndim
        d1, d2 = norm_dim(dim1, nd), norm_dim(dim2, nd)
        if d1 == d2:
            raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        x = self if (d1, d2) == (nd - 2, nd - 1) else self.movedim((d1, d2), (-2, -1))
        n, m = x._shape[-2], x._shape[-1]
        rows = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
        start = offset if offset >= 0 else -offset * m
        flat = x._reshaped((*x._shape[:-2], n * m))  # (a view even where torch's reshape would copy)
        if not rows:
            return flat[..., 0:0]
        return flat[..., start:start + (rows - 1) * (m + 1) + 1:m + 1]

    def diag(self, diagonal: int = 0):
        if self.ndim == 1:
            n = self._shape[0] + abs(diagonal)
            out = _factories.full(self._s, (n, n), 0, self.dtype, self._dev)
            r = arange_like(self, 0, self._shape[0]) + (0 if diagonal >= 0 else -diagonal)
            c = arange_like(self, 0, self._shape[0]) + (diagonal if diagonal >= 0 else 0)
            out[r, c] = self
            return out
        return self.diagonal(diagonal)

    def trace(self):
        return self.diagonal().sum()

    # ------------------------------------------------------------------ indexing
    __getitem__ = _indexing.getitem  # (the function itself: one Python call less for ``x[i]``)

    __setitem__ = _indexing.setitem  # (as ``__getitem__``: ``t[i][0][j] = 1`` in a loop, one Python call less)

    def gather(self, dim: int, index):
        if not index._shape or not self._shape or 0 in index._shape:
            return self._gather_special(dim, index)
        return self._rec("gather", [self, index], {"dim": dim})

    def _gather_special(self, dim: int, index):
        """torch's gather where the op table's does not go: an empty index (of any rank and integer dtype) gives an
        empty result of its shape; a 0-d input or index counts as 1-d."""
        norm_dim(dim, builtins.max(self.ndim, 1))
        if 0 in index._shape:  # (a slice of the input: its gradient is zeros, as torch's)
            return self.reshape(-1).narrow(0, 0, 0).reshape(*index._shape)
        if builtins.max(self.ndim, 1) != builtins.max(index.ndim, 1):
            raise ShapeError("gather(): index tensor must have the same number of dimensions as input tensor")
        return self.reshape(-1).gather(0, index.reshape(-1)).reshape(*index._shape)

    def take_along_dim(self, indices, dim: int | None = None):
        if dim is None:
            return self.flatten().gather(0, _wrap_index(indices.flatten(), self.numel()))
        d = norm_dim(dim, self.ndim)
        indices = _wrap_index(indices, self._shape[d] if self.ndim else 1)
        shape = list(np.broadcast_shapes(tuple(s if i != d else 1 for i, s in enumerate(self._shape)),
                                         tuple(s if i != d else 1 for i, s in enumerate(indices._shape))))
        xs = list(shape)
        xs[d] = self._shape[d]
        ix = list(shape)
        ix[d] = indices._shape[d]
        return self.expand(*xs).gather(d, indices.expand(*ix))

    def scatter(self, dim: int, index, src=None, value=None, *, reduce=None):
        if src is None:
            src = value
        if not isinstance(src, Tensor):
            src = self._s.scalar(src, self.dtype, self._dev).expand(*index.shape)
        if reduce == "add":
            return self.scatter_add(dim, index, src)
        if reduce == "multiply":
            return self.scatter_reduce(dim, index, src, "prod")
        if reduce is not None:
            raise ValueError(f"reduce argument must be either add or multiply, got {reduce!r}")
        if self.ndim == 0:  # torch treats a 0-d tensor as one element along dim 0
            return self.reshape(1).scatter(0, index.reshape(1), src.reshape(1)).reshape(())
        return self._rec("scatter", [self, index, src.to(self.dtype)], {"dim": dim})

    def scatter_add(self, dim: int, index, src):
        if self.ndim == 0:
            return self.reshape(1).scatter_add(0, index.reshape(1), src.reshape(1)).reshape(())
        return self._rec("scatter_add", [self, index, src.to(self.dtype)], {"dim": dim})

    def index_select(self, dim: int, index):
        if self.ndim == 0:  # torch treats a 0-d tensor as one element along dim 0
            norm_dim(dim, 1)
            return self.reshape(1).index_select(0, index).reshape(())
        d = norm_dim(dim, self.ndim)
        if index.ndim > 1:
            raise ShapeError("index_select(): Index is supposed to be a vector")
        return self._rec("index", [self.moveaxis(d, 0) if d else self, index.reshape(-1)],
                         {"dim": 0}).moveaxis(0, d) if d else \
            self._rec("index", [self, index.reshape(-1)], {"dim": 0})

    def index_add(self, dim: int, index, source, *, alpha=1):
        if self.ndim == 0:
            norm_dim(dim, 1)
            return self.reshape(1).index_add(0, index.reshape(-1), source.reshape(-1), alpha=alpha).reshape(())
        d = norm_dim(dim, self.ndim)
        src = source * alpha if alpha != 1 else source
        x = self.moveaxis(d, 0) if d else self
        s = src.moveaxis(d, 0) if d else src
        out = x._rec("index_put", [x, s.to(self.dtype), index.reshape(-1)], {"dim": 0, "accumulate": True})
        return out.moveaxis(0, d) if d else out

    def index_fill(self, dim: int, index, value):
        if self.ndim == 0:
            norm_dim(dim, 1)
            return self.reshape(1).index_fill(0, index, value).reshape(())
        d = norm_dim(dim, self.ndim)
        hit = _factories.full(self._s, (self._shape[d],), 0, D.bool_, self._dev)
        hit[index] = True  # a mask, not a write per index: a repeated index fills (and gives value's gradient) once
        shape = [1] * self.ndim
        shape[d] = -1
        return where(hit.reshape(shape), self._operand(value).to(self.dtype), self)

    def masked_select(self, mask):
        """The elements where ``mask`` is true, as 1-D (``mask`` and ``self`` broadcast together; a sync point)."""
        if mask.shape != self.shape:
            shape = np.broadcast_shapes(tuple(self._shape), tuple(mask.shape))
            return self.expand(*shape)[mask.expand(*shape)]
        return self[mask]

    # sort, argsort, msort, topk, kthvalue, unique, multinomial: client/sorting.py installs them

    def nonzero(self, *, as_tuple: bool = False):
        """Indices of non-zero elements (a sync point: the output shape depends on the data)."""
        a = self._numpy()
        if a.ndim == 0:  # torch treats a 0-d tensor as one element: (1, 0) or (0, 0) indices
            a = a.reshape(1)
            if as_tuple:
                return (self._operand(np.nonzero(a)[0].astype(np.int64)),)
            return self._operand(np.zeros((int(np.count_nonzero(a)), 0), np.int64))
        idx = np.nonzero(a)
        if as_tuple:
            return tuple(_factories.from_data(self._s, i.astype(np.int64), None, self._dev) for i in idx)
        return _factories.from_data(self._s, np.stack(idx, axis=1).astype(np.int64) if idx else
                                    np.zeros((0, 0), np.int64), None, self._dev)

    # ------------------------------------------------------------------ in-place
    def _assign(self, new: Tensor) -> Tensor:
        """Rebind this tensor to ``new``'s value (cast to our dtype); views see it, bases get it."""
        if new._shape != self._shape:
            new = new.expand(*self._shape) if new._shape != self._shape else new
        if new.dtype is not self.dtype:
            D.check_cast(new.dtype, self.dtype)
            new = new.to(self.dtype)
        if self.requires_grad or self._base is not None:  # (else nothing for autograd to refuse)
            _autograd_engine.check_inplace(self, new)
        if self.requires_grad and not new.requires_grad:
            # torch keeps the history: a tensor that requires grad still does after an in-place op, and what its old
            # value came from gets a zero gradient (fill_, zero_, copy_ of a value without history)
            new = zero_grad_from(new, self)
        V.assign(self, new)
        return self

    def add_(self, other, *args, alpha=1):
        if args:
            other, alpha = _alpha_first("add_", (other, *args), alpha)
        return self._assign(self.add(other, alpha=alpha))

    def sub_(self, other, *args, alpha=1):
        if args:
            other, alpha = _alpha_first("sub_", (other, *args), alpha)
        if alpha == 1 and type(other) is Tensor:  # (``self - other``'s node, without the calls to it: Normalize; not a
            # subclass's, whose reflected ``__rsub__`` Python asks first: a sparse tensor's)
            return self._assign(self._binary("sub", _no_bool_sub(self, other)))
        return self._assign(self.sub(other, alpha=alpha))

    def mul_(self, other):
        return self._assign(self * other)

    def div_(self, other, *, rounding_mode=None):
        return self._assign(self.div(other, rounding_mode=rounding_mode))

    def pow_(self, exponent):
        return self._assign(self.pow(exponent))

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._assign(self.clamp(min, max))

    clip_ = clamp_

    def zero_(self):
        """Fill with zeros in place (``fill_(0)``)."""
        return self.fill_(0)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None, **kw):
        """Fill with draws from U(a, b) in place (torch's ``uniform_(from=0, to=1)``; ``from``/``to`` are accepted as
        keywords too)."""
        a, b = kw.pop("from", a), kw.pop("to", b)
        if kw:
            raise TypeError(f"uniform_() got unexpected keyword arguments {sorted(kw)}")
        r = _factories.random(self._s, "rand", self._shape, _draw_dtype(self), self._dev, generator)
        return self._assign(r * (b - a) + a)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        """Fill with draws from N(mean, std^2) in place."""
        r = _factories.random(self._s, "randn", self._shape, _draw_dtype(self), self._dev, generator)
        return self._assign(r * std + mean)

    def fill_(self, value):
        """Fill with ``value`` (a number, or a 0-d tensor) in place. A number is one ``full`` node, which the tensor
        (or, for a view, its base) takes; a 0-d tensor filled with a Python number takes the session's cached
        scalar instead (``Session.scalar``, which ``x + 1`` reads too), through a lazy alias: no node at all
        (``p.grad.zero_()`` of a scalar parameter, a step counter's reset)."""
        if isinstance(value, Tensor):
            return self._assign(value.to(self.dtype).expand(*self._shape))
        s = self._s
        if not self._shape and type(value) in _FILL_SCALARS and s._capture is None:
            return self._assign(V.detached_alias(s.scalar(value, self.dtype, self._dev)))
        return self._assign(_factories.full(s, self._shape, value, self.dtype, self._dev))

    def copy_(self, src, non_blocking: bool = False):
        src = self._operand(src)
        if src._dev != self._dev:
            src = src.to(self._dev)
        return self._assign(src.to(self.dtype).expand(*self._shape))

    def masked_fill_(self, mask, value):
        return self._assign(self.masked_fill(mask, value))

    def index_add_(self, dim: int, index, source, *, alpha=1):
        return self._assign(self.index_add(dim, index, source, alpha=alpha))

    def index_fill_(self, dim: int, index, value):
        return self._assign(self.index_fill(dim, index, value))

    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        return self._assign(self.scatter(dim, index, src, value, reduce=reduce))

    def scatter_add_(self, dim, index, src):
        return self._assign(self.scatter_add(dim, index, src))

    def lerp_(self, end, weight):
        return self._assign(self.lerp(end, weight))

    def addcmul_(self, t1, t2, *, value=1):
        return self._assign(self + t1 * t2 * value)

    def addcdiv_(self, t1, t2, *, value=1):
        return self._assign(self + t1 / t2 * value)

    def floor_divide_(self, other):
        return self._assign(self // other)

    def remainder_(self, other):
        return self._assign(self % other)

    def __iadd__(self, o):
        return self.add_(o)

    def __isub__(self, o):
        return self.sub_(o)

    def __imul__(self, o):
        return self.mul_(o)

    def __itruediv__(self, o):
        return self.div_(o)

    def __ifloordiv__(self, o):
        return self.floor_divide_(o)

    def __imod__(self, o):
        return self.remainder_(o)

    def __ipow__(self, o):
        return self.pow_(o)

    def __iand__(self, o):
        return self._assign(self & o)

    def __ior__(self, o):
        return self._assign(self | o)

    def __ixor__(self, o):
        return self._assign(self ^ o)

    def __ilshift__(self, o):
        return self._assign(self << o)

    def __irshift__(self, o):
        return self._assign(self >> o)

    # ------------------------------------------------------------------ views plumbing
    def _refresh(self) -> None:
        V.refresh(self)

    # ------------------------------------------------------------------ autograd (client/autograd_engine.py)
    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
        """Accumulate this tensor's gradient into the leaves' ``.grad`` (the backward graph comes from the
        autograd service, cached by the graph's structure, and runs on the devices). The pending forward pass is
        shipped first when it is large enough (``Session.ship_forward``): the devices run it meanwhile; and, in a loop
        whose batches change shape, the backward pass is shipped on its own (``Session.ship_backward``)."""
        s = self._s
        s.ship_forward()
        _autograd_engine.backward(self, gradient, retain_graph, create_graph, inputs=inputs)
        s.ship_backward()

    def register_hook(self, hook):
        """Call ``hook(grad)`` each time the gradient with respect to this tensor is computed; a tensor it returns
        replaces the gradient (``p.register_hook(lambda g: g.clamp(-1, 1))``). Returns a handle with ``remove()``.
        See ``autograd_engine.register_hook``."""
        return _autograd_engine.register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after each backward pass accumulated into this leaf's ``.grad``."""
        return _autograd_engine.register_post_accumulate_grad_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor at the next backward."""
        _autograd_engine.retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad


def _op_method(op: str, nin: int, names: tuple[str, ...]):
    """The Tensor method that records the elementwise ``op``, under the names its ``OpDef.methods`` gives."""
    if nin == 1:
        def method(self):
            return self._rec(op, [self])
    else:
        def method(self, other):
            return self._binary(op, other)
    method.__name__ = names[0]
    method.__qualname__ = f"Tensor.{names[0]}"
    also = f" (also ``{'``, ``'.join(names[1:])}``)" if len(names) > 1 else ""
    method.__doc__ = f"The ``{op}`` op, elementwise{also}."
    return method


# the elementwise methods the op table declares (OpDef.methods: the name, then aliases bound to the same function); a
# name also written by hand above would be a second home for the op, so it is refused
for _op in _OPS.values():
    if _op.methods:
        _fn = _op_method(_op.name, _op.nin, _op.methods)
        for _name in _op.methods:
            if _name in Tensor.__dict__:
                raise ValueError(f"Tensor.{_name} is written by hand and declared by the op table's {_op.name!r}")
            setattr(Tensor, _name, _fn)


#: torch's names of dtypes in its messages about an assigned gradient: the C++ type, then the scalar type
_CXX_NAMES = {"float32": ("float", "Float"), "float64": ("double", "Double"), "float16": ("c10::Half", "Half"),
              "bfloat16": ("c10::BFloat16", "BFloat16"), "int64": ("long int", "Long"), "int32": ("int", "Int"),
              "int16": ("short int", "Short"), "int8": ("signed char", "Char"), "uint8": ("unsigned char", "Byte"),
              "bool": ("bool", "Bool"), "complex64": ("c10::complex<float>", "ComplexFloat"),
              "complex128": ("c10::complex<double>", "ComplexDouble")}


def _check_grad(t: Tensor, g) -> None:
    """torch's checks of ``t.grad = g`` (``g`` not None), with its messages."""
    if not isinstance(g, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(g).__name__}")
    if g is t:
        raise RuntimeError("can't assign Variable as its own grad")
    if g.dtype is not t.dtype:
        got = _CXX_NAMES.get(g.dtype.name, (g.dtype.name,))[0]
        want = _CXX_NAMES.get(t.dtype.name, (None, t.dtype.name))[1]
        raise RuntimeError(f"attempting to assign a gradient with dtype '{got}' to a tensor with grad_dtype '{want}'. "
                           "The gradient must match the tensor's grad_dtype (defaults to the tensor's dtype). You can "
                           "set the tensor's grad_dtype attribute with a specific dtype, or None to allow any dtype. "
                           "Set grad_dtype with caution. Diverging the dtypes of a tensor and its gradient may break "
                           "downstream systems that assume they match.")
    if g._dev != t._dev:
        raise RuntimeError(f"attempting to assign a gradient located on device '{g._dev}' to a tensor located on "
                           f"device '{t._dev}'. Please ensure that the gradient and the tensor are on the same device")
    if g._shape != t._shape:
        raise RuntimeError(f"attempting to assign a gradient of size '{list(g._shape)}' to a tensor of size "
                           f"'{list(t._shape)}'. Please ensure that the gradient and the tensor are the same size")


def _alpha_first(name: str, args: tuple, alpha):
    """``(other, alpha)`` of ``name``'s call with positional ``args`` (after ``self``): torch's deprecated
    ``name(Number alpha, Tensor other)`` warned of once, as torch does; else ``args`` must be ``(other,)``."""
    if len(args) == 1:
        return args[0], alpha
    if len(args) == 2 and isinstance(args[0], (builtins.int, builtins.float, np.number)) \
            and isinstance(args[1], Tensor):
        # (old training loops' ``p.data.add_(-lr, p.grad.data)``: torch still takes it, and warns once a process)
        warn_once(name, f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\nConsider using "
                  f"one of the following signatures instead:\n\t{name}(Tensor other, *, Number alpha = 1)", 3)
        return args[1], args[0]
    raise TypeError(f"{name}() takes 1 positional argument but {len(args)} were given")


def _wrap_index(index: Tensor, n: int) -> Tensor:
    """Negative indices counted from the end (torch's take_along_dim and take accept them)."""
    return where(index < 0, index + n, index)


#: the movement methods' checked arguments, memoised per input shape (and dtype, where the node's inference is kept)
#: and the arguments as given, when those are ints (``type(d) is int``: no bool, no numpy int, no tensor, as the
#: checks they skip would reject or convert them): ``reshape``/``view``'s target shape, ``flatten``'s and
#: ``unsqueeze``'s output shape, ``permute``'s/``transpose``'s ``_permute_plan``, ``expand``'s node ``known`` (each kept
#: by ``views.remember``, with its bound)
_RESHAPES: dict = {}
#: a reshape's view step, node attributes and their key by its output shape (a step and a recorded node's attributes
#: are never changed: ``views._ALIASES`` shares an alias's the same way), kept from the shape's second sighting
#: (``memos.remember_again``): ``x.view(-1, 1, 1)`` and ``x.reshape(-1, 784)`` of every sample or step build none
_RESHAPE_PARTS: dict = {}
_RESHAPE_SEEN: dict = {}
_FLATTENS: dict = {}
_UNSQUEEZES: dict = {}
_PERMUTES: dict = {}
_TRANSPOSES: dict = {}
_EXPANDS: dict = {}
#: the sequence types a movement method takes as its one argument (``x.view((a, b))``, ``x.expand(t.shape)``)
_SEQS = (tuple, list, Size)
_FILL_SCALARS = (builtins.bool, builtins.int, builtins.float)  # (``fill_``'s numbers a cached scalar gives)
_HALF = frozenset({D.float16, D.bfloat16})
#: the binary ops whose kernel computes a half tensor with a Python number in float32 (torch's opmath type)
_OPMATH_BINARY = frozenset({"mul", "div"})
_SCALE_NUMBERS = (builtins.int, builtins.float)  # (an ``alpha`` that ``add_scaled`` takes: a bool is not a scale)


def _ints(args: tuple) -> bool:
    """Whether every element of ``args`` is an ``int`` (exactly: its memo key is its value)."""
    for a in args:
        if type(a) is not int:
            return False
    return True


def _size(args, size=None) -> tuple[int, ...]:
    """Accept ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])`` and ``f(Size)`` (``args``), or ``f(size=(2, 3))`` (``size``,
    torch's keyword: not both)."""
    if size is not None:
        if args:
            raise TypeError("the size was given twice: as positional arguments and as size=")
        args = (size,)
    if len(args) == 1 and isinstance(args[0], (tuple, list, Size)):
        args = args[0]
    for a in args:
        if type(a) is not int:
            break
    else:  # (plain ints, the usual size: as they are)
        return tuple(args)
    out = []
    for a in args:
        if isinstance(a, Tensor):
            a = int(a)
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"expected a sequence of ints for a size, got {a!r}")
        out.append(int(a))
    return tuple(out)


#: (op, dim, keepdim) -> (attrs, attrs key) of a reduction over one int dim or all (``Tensor._reduce``; kept as the
#: view shortcuts' memos are, :func:`~.memos.remember`: a dim out of range is kept before inference refuses it)
_REDUCTIONS: dict = {}


def _reduction_attrs(op: str, dim, keepdim: bool) -> tuple:
    attrs = {"dims": _dims_attr(dim), "keepdim": keepdim}
    return remember(_REDUCTIONS, (op, dim, keepdim), (attrs, _attrs_key(op, attrs)))


def _dims_attr(dim):
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return [int(d) for d in dim]
    return [int(dim)]


def _no_bool_sub(a: Tensor, b):
    """torch refuses ``-`` with a bool operand; returns ``b`` when the subtraction is allowed."""
    if a.dtype is D.bool_ or (isinstance(b, Tensor) and b.dtype is D.bool_) or isinstance(b, (bool, np.bool_)):
        raise DTypeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                         "to invert a mask, use the `~` or `logical_not()` operator instead.")
    return b


def _placed(t: Tensor, device) -> str:
    """``device`` (a name, ``device(...)`` or an int) checked on ``t``'s session; None: ``t``'s own."""
    return t._dev if device is None else t._s.check_device(device_name(device))


def _draw_dtype(t: Tensor) -> D.DType:
    """The dtype ``t.uniform_()`` and ``t.normal_()`` draw in: ``t``'s when floating, else the default float."""
    return t.dtype if t.dtype.is_floating_point else D.get_default_dtype()


def _fits(v: int, dt: D.DType) -> bool:
    """Whether Python int ``v`` is representable in integer dtype ``dt``."""
    info = np.iinfo(dt.np)
    return info.min <= v <= info.max


_indexing.install(Tensor)

# torch's derived math, array and random functions as methods (x.addmm, x.unfold, x.cauchy_...:
# client/math_extras.py, client/array_extras.py, client/random_fills.py, client/linalg_legacy.py; x.to_sparse:
# client/sparse.py): client/_install.py imports each module that adds them (one being imported first goes on
# from itself when it has run), so Tensor is complete once this module has loaded
_install.load()
