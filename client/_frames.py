"""Where a recorded op was called from: the first frame outside the client package (:func:`_user_frame`, which
every recorded op keeps) and its line (:func:`user_line`). Below the session and the autograd engine, which both
record, and ``tw.compile``'s trace; it imports nothing of the package."""

from __future__ import annotations

import os
import sys

_CLIENT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: the code file names seen by :func:`_user_frame`, the user's (outside the client package) and the client's. A set
#: hit on the name (a string, its hash cached) is what every recorded op's search costs once the file was seen: one
#: ``in`` test, where ``str.startswith`` or a dict's ``get`` is a method call
_USER_FILES: set[str] = set()
_CLIENT_FILES: set[str] = set()
_MAX_FILES = 4096  # (code made by exec/compile under ever new names: the sets start again past this)
_getframe = sys._getframe


def _is_user_file(name: str) -> bool:
    """Whether code file ``name`` is the user's, remembered in :data:`_USER_FILES` or :data:`_CLIENT_FILES`."""
    if len(_USER_FILES) + len(_CLIENT_FILES) >= _MAX_FILES:
        _USER_FILES.clear()
        _CLIENT_FILES.clear()
    user = not name.startswith(_CLIENT_DIR)
    (_USER_FILES if user else _CLIENT_FILES).add(name)
    return user


def _user_frame(up: int = 2):
    """Where the first caller outside the tensorwire client package is: ``(its code, the offset of its current
    instruction)``, the ``where`` every recorded op keeps, whose (file, line) :func:`user_line` works out when
    something needs it (an error's message, ``tw.compile``'s reasons). The search starts ``up`` frames above this
    function (2: its caller's caller): a caller that knows the frames above it to be the client's passes more, and
    those frames are skipped unseen (each frame the walk looks at is made into a Python object). It runs for every
    recorded op: a frame's ``f_lineno`` would walk its code's line table from the start each time, most of this
    function's cost, for a line that is almost never read."""
    f = _getframe(up)
    user_files, client_files = _USER_FILES, _CLIENT_FILES
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if name in user_files or name not in client_files and _is_user_file(name):
            return (code, f.f_lasti)
        f = f.f_back
    return None


def user_line(where) -> tuple | None:
    """The user's ``(file, line)`` of a recorded op's ``where`` (:func:`_user_frame`'s ``(code, instruction
    offset)``: the line that frame's ``f_lineno`` gave when it was recorded); a ``(file, line)`` or None as it is."""
    if where is None or type(where[0]) is str:
        return where
    code, lasti = where
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return code.co_filename, line
    return code.co_filename, None


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` made by this function's caller name the first frame outside
    the client package: the user's line, for a warning of a function that other functions of the package may call
    (``x.cross(y)`` reaches ``tw.cross`` through the method's wrapper). Only for warnings: it walks the stack."""
    f = _getframe(1)
    level = 1
    while f.f_back is not None and f.f_code.co_filename.startswith(_CLIENT_DIR):
        f = f.f_back
        level += 1
    return level
