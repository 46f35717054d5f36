"""``tw.nn.utils.stateless``: torch's ``functional_call``, a module called with other tensors in place of its
parameters and buffers (MAML's inner loop, per-sample gradients, ensembles of one module's weights).

The tensors are swapped in by name (``"layer1.weight"``) for the call and the module's own put back afterwards, when the
call raises too; nothing is copied, so gradients flow to the tensors given. As torch's: a name may be a parameter, a
buffer or a plain tensor attribute (a missing one is set for the call and removed after), tied tensors follow the name
given for any of them (``tie_weights``), ``strict`` asks for exactly the module's names, and a tensor the module
rebinds during the call (a BatchNorm's running statistics) is written back to the dict given.
``tw.func.functional_call`` is the same function without the deprecation warning (it also takes a sequence of
dicts)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from tensorwire.tensor import Tensor

from ..module import Module
from ..parallel import DataParallel

__all__ = ["functional_call"]

#: a tensor's "no such attribute" in the swaps (the attribute is set for the call, then deleted)
_MISSING: Any = object()


def _check_name(name: str) -> None:
    if "." in name:
        raise KeyError('tensor name can\'t contain "."')
    if name == "":
        raise KeyError('tensor name can\'t be empty string ""')


def _swap_tensor(module: Module, name: str, tensor: Any, allow_missing: bool = False) -> Any:
    """Set ``module.<name>`` (a direct attribute) to ``tensor`` (:data:`_MISSING`: delete it) and return what it was
    (torch's ``swap_tensor``: a parameter or buffer is replaced in its registry, with no type check)."""
    if not isinstance(module, Module):
        raise TypeError(f"{module} is not an instance of tw.nn.Module")
    if tensor is not _MISSING and tensor is not None and not isinstance(tensor, Tensor):
        raise TypeError(f"{tensor} is not an instance of tw.Tensor")
    _check_name(name)
    if name in module._parameters:
        orig = module._parameters[name]
        if tensor is not _MISSING:
            module._parameters[name] = tensor
        else:
            del module._parameters[name]
    elif name in module._buffers:
        orig = module._buffers[name]
        if tensor is not _MISSING:
            module._buffers[name] = tensor
        else:
            del module._buffers[name]
    else:
        if hasattr(module, name):
            orig = getattr(module, name)
        else:
            if not allow_missing:
                raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
            orig = _MISSING
        if orig is not _MISSING and orig is not None and not isinstance(orig, Tensor):
            raise TypeError(f"attribute `{name}`: {orig} is not an instance of tw.Tensor")
        if tensor is not _MISSING:
            setattr(module, name, tensor)
        elif hasattr(module, name):
            delattr(module, name)
    return orig


class _Accessor:
    """Dotted names of a module tree to its submodules and tensors (torch's ``NamedMemberAccessor``, the part
    ``functional_call`` uses), with the submodules looked up once."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.memo: dict[str, Module] = {}

    def get_submodule(self, name: str) -> Module:
        """The submodule at dotted path ``name`` (``""``: the root)."""
        if not name:
            return self.module
        sub = self.memo.get(name)
        if sub is not None:
            return sub
        prefix, dot, attr = name.rpartition(".")
        parent = self.get_submodule(prefix) if dot else self.module
        try:
            sub = getattr(parent, attr)
        except AttributeError as ex:
            raise AttributeError(f"{parent._get_name()} has no attribute `{attr}`") from ex
        if not isinstance(sub, Module):
            raise TypeError(f"submodule `{name}`: {sub} is not an instance of tw.nn.Module")
        self.memo[name] = sub
        return sub

    def swap_tensor(self, name: str, value: Any, allow_missing: bool = False) -> Any:
        """Swap the tensor at dotted path ``name`` for ``value``; returns the one it held."""
        prefix, _, attr = name.rpartition(".")
        return _swap_tensor(self.get_submodule(prefix), attr, value, allow_missing=allow_missing)

    def swap_tensors_dict(self, named: dict, allow_missing: bool = False) -> tuple[dict, list[str]]:
        """Swap every ``name: tensor`` of ``named``; returns the tensors they held (:data:`_MISSING` where none) and
        the names that were missing. On an error, what was swapped is swapped back first."""
        orig: dict = {}
        missing: list[str] = []
        try:
            for name, tensor in named.items():
                was = self.swap_tensor(name, tensor, allow_missing=True)
                if was is _MISSING:
                    missing.append(name)
                orig[name] = was
        except Exception:
            for name, was in orig.items():
                self.swap_tensor(name, was, allow_missing=True)
            raise
        if missing and not allow_missing:
            for name, was in orig.items():
                self.swap_tensor(name, was, allow_missing=True)
            raise RuntimeError(f"Missing key(s): {', '.join(map(repr, missing))}.")
        return orig, missing

    def check_keys(self, keys) -> tuple[list[str], list[str]]:
        """(missing, unexpected): the module's tensor names not in ``keys``, and the keys that name none of them."""
        keys = set(keys)
        valid = {n for n, _ in self.module.named_parameters(remove_duplicate=False)}
        valid |= {n for n, _ in self.module.named_buffers(remove_duplicate=False)}
        return sorted(valid - keys), sorted(keys - valid)


def _untie_named_tensors_map(module: Module, parameters_and_buffers: dict) -> dict:
    """``parameters_and_buffers`` with every name tied to a given one (the same tensor under several names in the
    module) added with the given value; ValueError when different values are given for names of one tensor."""
    all_named: dict[str, Tensor] = {}
    all_named.update(module.named_parameters(remove_duplicate=False))
    all_named.update(module.named_buffers(remove_duplicate=False))
    names_of: dict[int, set[str]] = {}  # (by identity: a tensor's == is elementwise)
    for name, t in all_named.items():
        names_of.setdefault(id(t), set()).add(name)
    tied: dict[str, set[str]] = {}
    for names in names_of.values():
        if len(names) > 1:
            for name in names:
                tied[name] = names
    given_tied = {name for name in parameters_and_buffers if name in tied}
    for name in given_tied:
        names = tied[name]
        if (len(names & given_tied) > 1
                and len({id(parameters_and_buffers[n]) for n in names if n in parameters_and_buffers}) != 1):
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, which are tied. "
                             "Consider using tie_weights=False")
    untied = dict(parameters_and_buffers)
    for name in given_tied:
        for other in tied[name]:
            untied[other] = parameters_and_buffers[name]
    return untied


@contextlib.contextmanager
def _reparametrize_module(module: Module, parameters_and_buffers: dict, tie_weights: bool = False,
                          strict: bool = False) -> Iterator[None]:
    """Inside: ``module``'s tensors named in ``parameters_and_buffers`` are those given; after (an exception
    included): its own again, and any the call rebound written back to ``parameters_and_buffers``."""
    untied = _untie_named_tensors_map(module, parameters_and_buffers) if tie_weights else parameters_and_buffers
    accessor = _Accessor(module)
    if strict:
        missing, unexpected = accessor.check_keys(untied)
        msgs = []
        if unexpected:
            msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if msgs:
            raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(module._get_name(),
                                                                                 "\n\t".join(msgs)))
    orig: dict = {}
    try:
        orig, _ = accessor.swap_tensors_dict(untied, allow_missing=True)
        yield
    finally:
        new, _ = accessor.swap_tensors_dict(orig, allow_missing=True)
        # (a module that rebinds its tensors during the call, BatchNorm's running statistics: the dict sees them)
        parameters_and_buffers.update({k: new[k] for k in parameters_and_buffers if k in new})


def _functional_call(module: Module, parameters_and_buffers: dict, args: Any = None, kwargs: dict | None = None, *,
                     tie_weights: bool = True, strict: bool = False) -> Any:
    """:func:`functional_call` without the deprecation warning (``tw.func.functional_call`` calls it)."""
    if isinstance(module, DataParallel):
        raise RuntimeError("The stateless API can't be used with nn.DataParallel module")
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights, strict=strict):
        return module(*args, **kwargs)


def functional_call(module: Module, parameters_and_buffers: dict, args: Any = None, kwargs: dict | None = None, *,
                    tie_weights: bool = True, strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with the tensors of ``parameters_and_buffers`` (dotted name -> tensor) in place of
    the module's parameters and buffers of those names, the module's own restored after the call (torch's
    ``torch.nn.utils.stateless.functional_call``, deprecated there in favour of ``torch.func.functional_call``, with
    its FutureWarning). ``args``: a tuple of arguments, or one argument; ``tie_weights``: tensors tied in the module
    (one tensor under several names) take the value given for any of their names; ``strict``: RuntimeError unless the
    names are exactly the module's. For a parametrized tensor give its original
    (``parametrizations.<tensor>.original``): a value under the tensor's own name is assigned to it, which runs the
    parametrization's ``right_inverse``, as torch's."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed in "
                  "a future version of PyTorch. Please use `torch.func.functional_call` instead which is a drop-in "
                  "replacement.", FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)
