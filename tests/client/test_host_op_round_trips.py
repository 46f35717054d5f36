"""A host op (the client's LAPACK: ``client/host_ops.py``) fetches all its inputs in one round trip
(``Session.fetch_all``), and ``MultivariateNormal.log_prob`` costs one round trip, validated or not: its triangular
solve's two inputs come together, and the value's support check rides along (was three: the check's read, then each
input of the solve). Round trips are the session's flushes that wait for an answer (``_flush`` with a fetch or a
sync); values against PyTorch (2.13, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.distributions as twd
from tensorwire.host_ops import host_run
from tensorwire.linalg_lapack import SOLVE

from ._calls import counted, device_value

pytestmark = pytest.mark.usefixtures("session")

COV = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.5]])
RNG = np.random.default_rng(46)


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _waiting_flushes(session, fn):
    """``(fn(), the flushes that waited for an answer meanwhile)``."""
    with counted(session, "_flush") as (_, fetches):
        out = fn()
    return out, sum(1 for f in fetches if f)


def test_a_host_solve_fetches_both_inputs_in_one_round_trip(session):
    torch = _torch()
    a = np.tril(RNG.standard_normal((4, 4))) + 4 * np.eye(4)
    b = RNG.standard_normal((4, 2))
    A, B = device_value(tw.tensor(a)), device_value(tw.tensor(b))  # noqa: N806 - values only the device has
    x, n = _waiting_flushes(session, lambda: tw.linalg.solve_triangular(A * 1, B * 1, upper=False))
    assert n == 1
    np.testing.assert_allclose(x.numpy(), torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b),
                                                                        upper=False).numpy(), rtol=1e-12)


def test_inputs_the_client_holds_are_not_fetched(session):
    """Both inputs held (made by the client): no round trip; one held and one on the device: one."""
    A, B = tw.tensor(np.eye(3) * 2.0), tw.tensor(np.ones((3, 1)))  # noqa: N806
    (x, _), n = _waiting_flushes(session, lambda: host_run(SOLVE, A, B, name="solve", check_errors=True))
    assert n == 0
    (y, _), m = _waiting_flushes(session, lambda: host_run(SOLVE, A, device_value(B), name="solve", check_errors=True))
    assert m == 1
    np.testing.assert_allclose(x.numpy(), np.full((3, 1), 0.5))
    np.testing.assert_allclose(y.numpy(), np.full((3, 1), 0.5))


@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("how", ["covariance_matrix", "scale_tril", "precision_matrix"])
def test_mvn_log_prob_is_one_round_trip(session, validate, how):
    torch = _torch()
    loc = RNG.standard_normal(3)
    param = {"covariance_matrix": COV, "scale_tril": np.linalg.cholesky(COV),
             "precision_matrix": np.linalg.inv(COV)}[how]
    d = twd.MultivariateNormal(tw.tensor(loc), validate_args=validate, **{how: tw.tensor(param)})
    ref = torch.distributions.MultivariateNormal(torch.tensor(loc), **{how: torch.tensor(param)})
    for shape in [(3,), (5, 3), (2, 4, 3)]:
        value = RNG.standard_normal(shape)
        v = device_value(tw.tensor(value))
        lp, n = _waiting_flushes(session, lambda v=v: d.log_prob(v))
        assert n == 1, (shape, n)
        np.testing.assert_allclose(lp.numpy(), ref.log_prob(torch.tensor(value)).numpy(), rtol=1e-10)


def test_mvn_validation_still_raises_torchs_error(session):
    d = twd.MultivariateNormal(tw.zeros(3, dtype=tw.float64), covariance_matrix=tw.tensor(COV), validate_args=True)
    bad = device_value(tw.tensor(np.array([[0.0, np.nan, 1.0], [1.0, 2.0, 3.0]])))
    with pytest.raises(ValueError, match="within the support"):
        d.log_prob(bad)
    with pytest.raises(ValueError, match="right-most size of value must match event_shape"):
        d.log_prob(tw.zeros(2, 4, dtype=tw.float64))  # (a shape error: raised before anything is recorded)
    lax = twd.MultivariateNormal(tw.zeros(3, dtype=tw.float64), covariance_matrix=tw.tensor(COV),
                                 validate_args=False)
    assert np.isnan(lax.log_prob(bad).numpy()[0])  # (unvalidated: NaN, as torch's)
