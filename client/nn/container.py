"""``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict`` (and torch's deprecated
``Container``)."""

from __future__ import annotations

import operator
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from itertools import islice

from .module import Module, _addindent
from .parameter import Parameter


class _Registry(Module):
    """What the containers share: ``len``, iteration and the registry they keep their entries in
    (``_STORE``: ``"_modules"`` or ``"_parameters"``)."""

    _STORE = "_modules"

    @property
    def _entries(self) -> OrderedDict:
        return self.__dict__[self._STORE]

    def __len__(self) -> int:
        return len(self._entries)

    def _add(self, key: str, value) -> None:
        if self._STORE == "_modules":
            self.add_module(key, value)
        else:
            self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))


class _ListMixin(_Registry):
    """A list over the registry: entries named ``"0"``, ``"1"`` ... (Sequential keeps names given in an
    OrderedDict until an entry is removed or inserted), negative indices, append/extend/insert/del."""

    def __iter__(self):
        return iter(self._entries.values())

    def _idx(self, idx: int) -> int:
        n = len(self)
        idx = operator.index(idx)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return idx % n

    def _key(self, idx: int) -> str:
        return next(islice(self._entries, self._idx(idx), None))

    def _renumber(self, values: list) -> None:
        self._entries.clear()
        for i, v in enumerate(values):
            self._entries[str(i)] = v

    def __delitem__(self, idx) -> None:
        values = list(self._entries.values())
        del values[idx if isinstance(idx, slice) else self._idx(idx)]
        self._renumber(values)

    def append(self, value):
        self._add(str(len(self)), value)
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def insert(self, index: int, value):
        values = list(self._entries.values())
        values.insert(index, value)
        self._renumber(values)
        return self


class _DictMixin(_Registry):
    """A dict over the registry, keyed by the given names."""

    def __getitem__(self, key: str):
        return self._entries[key]

    def __setitem__(self, key: str, value) -> None:
        self._add(key, value)

    def __delitem__(self, key: str) -> None:
        del self._entries[key]

    def __iter__(self):
        return iter(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries

    def keys(self):
        return self._entries.keys()

    def items(self):
        return self._entries.items()

    def values(self):
        return self._entries.values()

    def update(self, values) -> None:
        items = values.items() if hasattr(values, "items") else values
        for k, v in items:
            self[k] = v


class Sequential(_ListMixin):
    """Modules applied in order; ``Sequential(m1, m2)`` or ``Sequential(OrderedDict(name=m))``."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(self._key(idx), module)

    def forward(self, input):  # noqa: A002
        for m in self._modules.values():
            input = m(input)  # noqa: A001
        return input

    def append(self, module: Module) -> Sequential:
        """``module`` added at the end; returns this Sequential."""
        return super().append(module)

    def extend(self, sequential) -> Sequential:
        """Each module of ``sequential`` (any iterable of modules) added at the end; returns this Sequential."""
        return super().extend(sequential)

    def insert(self, index: int, module: Module) -> Sequential:
        """``module`` inserted before ``index``; returns this Sequential."""
        return super().insert(index, module)


class ModuleList(_ListMixin):
    """A list of modules, registered (so their parameters are the parent's)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(self._idx(idx))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(self._idx(idx)), module)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def append(self, module: Module) -> ModuleList:
        """``module`` added at the end; returns this ModuleList."""
        return super().append(module)

    def extend(self, modules) -> ModuleList:
        """Each module of ``modules`` added at the end; returns this ModuleList."""
        return super().extend(modules)

    def insert(self, index: int, module: Module) -> None:
        """``module`` inserted before ``index``."""
        super().insert(index, module)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward; iterate over it")

    def __repr__(self) -> str:
        """torch's: consecutive modules with the same repr shown once, ``(0-5): 6 x Layer(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs: list[list] = []  # [first, last, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [_addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}", 2) for a, b, r in runs]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(_DictMixin):
    """A dict of modules, registered under their keys."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules) -> None:
        """Each (key, module) of ``modules`` (a mapping, or an iterable of pairs) set, in its order."""
        super().update(modules)

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        return self._modules.pop(key)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward; index it")


class ParameterList(_ListMixin):
    """A list of parameters, registered as ``"0"``, ``"1"`` ...."""

    _STORE = "_parameters"

    def __init__(self, values=None):
        super().__init__()
        for v in values or ():
            self.append(v)

    def __getitem__(self, idx: int) -> Parameter:
        n = len(self)
        return self._parameters[str(idx % n if -n <= idx < n else idx)]

    def __setitem__(self, idx: int, p) -> None:
        self._add(str(idx % len(self)), p)


class ParameterDict(_DictMixin):
    """A dict of parameters, registered under their keys."""

    _STORE = "_parameters"

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def update(self, parameters) -> None:
        """Each (key, parameter) of ``parameters`` set: in its order for an ``OrderedDict``, a ``ParameterDict`` or an
        iterable of pairs, sorted by key for another mapping (torch's rule)."""
        if isinstance(parameters, Mapping) and not isinstance(parameters, (OrderedDict, ParameterDict)):
            parameters = sorted(parameters.items())
        super().update(parameters)


class Container(Module):
    """torch's deprecated ``nn.Container``: a module whose keyword arguments become its submodules."""

    def __init__(self, **kwargs):
        warnings.warn("`nn.Container` is deprecated. All of its functionality is now implemented in `nn.Module`. "
                      "Subclass that instead.", FutureWarning, stacklevel=2)
        super().__init__()
        for key, value in kwargs.items():
            self.add_module(key, value)
