"""torch's warnings it gives once a process (``TORCH_WARN_ONCE``: a deprecated overload, ``torch.cross`` without
``dim``): :func:`warn_once`, one record of what was warned of for the client's modules. Imports nothing of the
package, so any module may use it."""

from __future__ import annotations

import warnings

#: the keys warned of in this process
_WARNED: set[str] = set()


def warn_once(key: str, message: str, stacklevel: int) -> None:
    """``warnings.warn(message, UserWarning)`` the first time ``key`` is given in this process; ``stacklevel`` counts
    from the caller, as ``warnings.warn``'s does."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
