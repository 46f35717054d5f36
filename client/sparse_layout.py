"""Tensor layouts (torch's ``torch.layout``): ``tw.strided``, ``tw.sparse_coo``, ``tw.sparse_csr`` ....

A layout is a ``str`` subclass: it compares equal to its name (``x.layout == "strided"`` holds, as it did when the
layout was a plain string) and prints as ``tensorwire.<name>``. This module imports nothing of the client, so
``client/tensor.py`` can name ``strided`` without an import circle (the sparse tensors are in
:mod:`tensorwire.sparse`).
"""

from __future__ import annotations


class layout(str):  # noqa: N801 - torch's name
    """How a tensor's elements are stored: ``strided`` (dense), ``sparse_coo``, ``sparse_csr`` ...."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"tensorwire.{str.__str__(self)}"

    __str__ = __repr__


strided = layout("strided")
sparse_coo = layout("sparse_coo")
sparse_csr = layout("sparse_csr")
sparse_csc = layout("sparse_csc")
sparse_bsr = layout("sparse_bsr")
sparse_bsc = layout("sparse_bsc")

#: every layout by name (``tw.layout``'s instances)
LAYOUTS = {str.__str__(x): x for x in (strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc)}
