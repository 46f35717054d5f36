"""Gaps found by running PyTorch's tutorials with ``import torch`` resolving to tensorwire, in ``nn``: softmax's
deprecated implicit ``dim`` warned of as torch does (``F.softmax``/``log_softmax``/``softmin`` and the modules), and
``load_state_dict``'s result and strict-mode error as torch prints them. Each against PyTorch where it is
installed."""

from __future__ import annotations

import warnings

import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn import functional as F

pytestmark = pytest.mark.usefixtures("session")


def _implicit_dims(lib) -> list:
    """(warning text, the line it names is this file's, the result) of each softmax without dim."""
    fn = lib.nn.functional
    x = lib.tensor([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0]])
    calls = [lambda: fn.softmax(x), lambda: fn.log_softmax(x), lambda: fn.softmin(x),
             lambda: fn.softmax(x[0]), lambda: lib.nn.Softmax()(x), lambda: lib.nn.LogSoftmax()(x),
             lambda: lib.nn.Softmin()(x), lambda: fn.softmax(x, dim=1), lambda: lib.nn.Softmax(dim=0)(x)]
    out = []
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = call()
        out.append(([(w.category.__name__, str(w.message)) for w in caught], [round(v, 4) for v in
                                                                            r.flatten().tolist()]))
    return out


def _message(name: str) -> list:
    return [("UserWarning", f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
                            "dim=X as an argument.")]


def test_softmax_without_dim_warns_as_torch():
    got = _implicit_dims(tw)
    assert [w for w, _ in got] == [_message("softmax"), _message("log_softmax"), _message("softmin"),
                                   _message("softmax"), _message("softmax"), _message("log_softmax"),
                                   _message("softmin"), [], []]
    torch = pytest.importorskip("torch")
    want = _implicit_dims(torch)
    assert [w for w, _ in got] == [w for w, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert a == pytest.approx(b, abs=1e-4)


def test_the_implicit_dim_warning_names_the_callers_line():
    x = tw.ones(2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        F.softmax(x)
        nn.Softmax()(x)
        nn.Softmin()(x)
        F.log_softmax(x, None, 4)  # (_stacklevel, torch's third argument: one frame further up)
    assert [w.filename for w in caught[:3]] == [__file__] * 3
    assert caught[3].filename != __file__


def test_softmax_third_positional_argument_is_torchs_stacklevel():
    x = tw.tensor([[1.0, 2.0]])
    assert F.softmax(x, 1, 3, dtype=tw.float64).dtype == tw.float64
    torch = pytest.importorskip("torch")
    assert torch.nn.functional.softmax(torch.tensor([[1.0, 2.0]]), 1, 3, dtype=torch.float64).dtype == torch.float64


def _load_results(lib) -> list:
    m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 1))
    sd = dict(m.state_dict())
    out = [repr(m.load_state_dict(sd)), str(m.load_state_dict(sd))]
    bad = dict(sd)
    del bad["0.weight"]
    bad["extra"] = lib.ones(1)
    r = m.load_state_dict(bad, strict=False)
    out += [repr(r), str(r), r.missing_keys, r.unexpected_keys, list(r), type(r).__name__]
    for state in (bad, {k: v for k, v in sd.items() if k != "1.bias"}, {**sd, "x": lib.ones(1)}):
        with pytest.raises(RuntimeError) as info:
            m.load_state_dict(state)
        out.append(str(info.value))
    return out


def test_load_state_dict_results_and_errors_read_as_torchs():
    got = _load_results(tw)
    assert got[:2] == ["<All keys matched successfully>"] * 2
    assert got[2] == "_IncompatibleKeys(missing_keys=['0.weight'], unexpected_keys=['extra'])" == got[3]
    assert got[8] == ('Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: "0.weight". '
                      '\n\tUnexpected key(s) in state_dict: "extra". ')
    torch = pytest.importorskip("torch")
    assert got == _load_results(torch)
