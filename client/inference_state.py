"""``torch.inference_mode`` with its state: ``torch.is_inference_mode_enabled()`` answers whether one is open.

:class:`inference_mode` is the grad-mode switch of :mod:`tensorwire.autograd_engine` (inside, no graph is recorded,
as ``no_grad``; ``inference_mode(False)`` turns grad mode on, as torch's) that also keeps, per thread as torch's,
whether inference mode is on; ``tw.inference_mode`` and ``tw.autograd.inference_mode`` are this class. Tensors
made inside are ordinary tensors (``Tensor.is_inference()`` stays False): only the flag is torch's.
"""

from __future__ import annotations

import functools
import threading

from .autograd_engine import inference_mode as _engine_inference_mode

__all__ = ["inference_mode", "is_inference_mode_enabled"]


class _State(threading.local):
    on = False


_state = _State()


def is_inference_mode_enabled() -> bool:
    """Whether an ``inference_mode()`` scope (or decorated call) is open in this thread, as torch's."""
    return _state.on


class inference_mode(_engine_inference_mode):  # noqa: N801 - torch's name
    """Context manager / decorator: no graph is recorded inside (as ``no_grad``), and
    :func:`is_inference_mode_enabled` is True; ``inference_mode(False)`` does neither (grad mode on, the flag off)."""

    def __init__(self, mode: bool = True):
        super().__init__(mode)
        self.mode = bool(mode)
        self._prev_inference: list[bool] = []

    def __enter__(self):
        self._prev_inference.append(_state.on)
        _state.on = self.mode
        return super().__enter__()

    def __exit__(self, *exc):
        _state.on = self._prev_inference.pop()
        return super().__exit__(*exc)

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> inference_mode:
        """A new switch of the same mode (torch's ``clone``)."""
        return self.__class__(self.mode)
