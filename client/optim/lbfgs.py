"""``tw.optim.LBFGS``: limited-memory BFGS with an optional strong-Wolfe line search, as torch's.

The algorithm is torch's (``torch/optim/lbfgs.py``, after minFunc) step for step. The vectors (the flat
gradient, the direction, the curvature history) and the two-loop recursion's dot products stay on the
cluster as lazy tensors; only the decisions torch takes on a Python ``bool`` or ``float`` (the loss, the
stopping tests, the line search's step lengths) fetch a number. The line search works on those numbers as
Python floats: identical to torch's 0-d tensor arithmetic for float64 parameters, within float32 rounding
(one ulp per operation) for float32 ones.

The numbers a decision needs are recorded as soon as what they depend on is, and read together (:func:`_floats`):
after an evaluation of the closure, its loss, the gradient's largest entry, the last step's largest entry, the
next iteration's curvature ``y.s`` and the slope ``g.d`` of its direction go in one round trip, where torch's order
reads them one at a time. The direction is recorded before ``y.s`` is known, from the memory with the pair
``(y, s)`` taken (torch takes it when ``y.s > 1e-10``, nearly always); when the pair is refused it is computed again
from the memory as it was, and its slope read on its own. An iteration then waits once, not five times; the values
and the decisions are torch's.
"""

from __future__ import annotations

from tensorwire.autograd_engine import enable_grad
from tensorwire.creation import zeros
from tensorwire.functions import cat
from tensorwire.nn._tensors import alias, no_grad, rebind
from tensorwire.tensor import Tensor

from .optimizer import Optimizer

__all__ = ["LBFGS"]


def _floats(*values) -> list:
    """``float`` of each value (0-d tensors or numbers; ``None`` stays ``None``), the tensors read in one round
    trip: the newest is read first, and the session fetches the 0-d results recorded before it along with it
    (``Session.fetch``), so the others are known by then."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    if len(tensors) > 1:
        float(max(tensors, key=lambda v: v._id))
    return [None if v is None else float(v) for v in values]


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to ``bounds``."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square**0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """torch's strong-Wolfe line search; returns ``(f_new, g_new, t, evaluations)``. ``f``, ``t`` and ``gtd``
    are Python floats, ``g`` and ``d`` flat tensors. ``obj_func(x, t, d)`` returns the loss, the flat gradient and
    its slope along ``d`` at ``x + t d`` (the numbers read together)."""
    d_norm = d.abs().max()  # (read along with the first evaluation)
    f_new, g_new, gtd_new = obj_func(x, t, d)
    d_norm = float(d_norm)
    ls_func_evals = 1
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    bracket, bracket_f, bracket_g, bracket_gtd = [], [], [], []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new, gtd_new = obj_func(x, t, d)
        ls_func_evals += 1
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point satisfies the strong Wolfe conditions
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new, gtd_new = obj_func(x, t, d)
        ls_func_evals += 1
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """L-BFGS (torch's defaults: ``lr=1``, ``max_iter=20``, ``max_eval=max_iter * 5 // 4``,
    ``tolerance_grad=1e-7``, ``tolerance_change=1e-9``, ``history_size=100``; ``line_search_fn`` is ``None`` or
    ``"strong_wolfe"``). ``step(closure)`` needs a closure that clears the gradients, computes the loss, calls
    ``backward`` and returns the loss. One parameter group only, as torch."""

    def __init__(
        self,
        params,
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(
            params,
            dict(
                lr=lr,
                max_iter=max_iter,
                max_eval=max_eval,
                tolerance_grad=tolerance_grad,
                tolerance_change=tolerance_change,
                history_size=history_size,
                line_search_fn=line_search_fn,
            ),
        )
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def add_param_group(self, param_group: dict) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(param_group)

    def _numel(self) -> int:
        if self._numel_cache is None:
            self._numel_cache = sum(p.numel() for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self):
        views = [
            zeros(p.numel(), dtype=p.dtype, device=p._dev, session=p._s) if p.grad is None else p.grad.reshape(-1)
            for p in self._params
        ]
        return cat(views, 0)

    def _add_grad(self, step_size: float, update) -> None:
        """Each parameter plus its piece of ``update`` times ``step_size``: the flat vector scaled once, not each
        piece (the same products; one recorded op a parameter fewer)."""
        update = update * step_size
        offset = 0
        for p in self._params:
            n = p.numel()
            rebind(p, p + update[offset : offset + n].reshape(p.shape))
            offset += n

    def _clone_param(self):
        return [alias(p) for p in self._params]

    def _set_param(self, params_data) -> None:
        for p, v in zip(self._params, params_data):
            rebind(p, alias(v))

    def _directional_evaluate(self, closure, x, t, d):
        """Loss, flat gradient and the gradient's slope along ``d`` at ``x + t d``; the parameters are put back."""
        self._add_grad(t, d)
        loss = closure()
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        loss, gtd = _floats(loss, flat_grad.dot(d))
        return loss, flat_grad, gtd

    def step(self, closure):
        """Up to ``max_iter`` L-BFGS iterations; ``closure`` re-evaluates the model and returns the loss.
        Returns the loss of the first evaluation, as torch."""
        sessions = {p._s for p in self._params}

        def evaluate():
            with enable_grad():
                loss = closure()
            for sess in sessions:  # (the backward goes out with the next op: the devices run it while the
                sess.mark_step()  # numbers to read and the next direction are recorded)
            return loss

        with no_grad():
            out = self._step(evaluate)
        for sess in sessions:
            sess.mark_step()
        return out

    @staticmethod
    def _curvature(flat_grad, prev_flat_grad, d, t) -> tuple:
        """``(y, s, y.s)`` of the last step: the change of the gradient and the step taken (``d t``)."""
        y = flat_grad - prev_flat_grad
        s = d * t
        return y, s, y.dot(s)

    @staticmethod
    def _remember(memory: tuple, y, s, ys, history_size: int) -> tuple:
        """The memory ``(old_dirs, old_stps, ro, H_diag)`` with the pair ``(y, s)`` added (the oldest dropped at
        ``history_size``), as new lists: the caller keeps the old memory until the pair is known to be taken."""
        old_dirs, old_stps, ro, _ = memory
        drop = 1 if len(old_dirs) == history_size else 0
        return old_dirs[drop:] + [y], old_stps[drop:] + [s], ro[drop:] + [1.0 / ys], ys / y.dot(y)

    @staticmethod
    def _two_loop(flat_grad, memory: tuple):
        """The direction ``d = -H g`` by the two-loop recursion over the memory (0-d tensors stay lazy): one
        ``lbfgs_direction`` op (``protocol/ops/optim.py``) where every number is a tensor of the gradient's dtype, in
        place of ~11 recorded ops a remembered pair."""
        old_dirs, old_stps, ro, H_diag = memory
        num_old = len(old_dirs)
        ins = [flat_grad, H_diag, *old_dirs, *old_stps, *ro]
        if num_old and all(isinstance(v, Tensor) and v.dtype is flat_grad.dtype for v in ins):
            return flat_grad._rec("lbfgs_direction", ins)
        al = [None] * num_old
        q = -flat_grad
        for i in range(num_old - 1, -1, -1):
            al[i] = old_stps[i].dot(q) * ro[i]
            q = q - old_dirs[i] * al[i]
        r = q * H_diag
        for i in range(num_old):
            be_i = old_dirs[i].dot(r) * ro[i]
            r = r + old_stps[i] * (al[i] - be_i)
        return r

    def _next_direction(self, flat_grad, prev_flat_grad, d, t, memory, history_size: int) -> tuple:
        """What the next iteration needs, recorded ahead of its reads: ``(ys, s, memory, d, gtd)``, the curvature
        ``y.s`` and the step ``s`` just taken (None, None on the first iteration of all), then the candidate: the
        memory with the pair ``(y, s)`` taken, the direction from it and its slope ``g.d`` (a 0-d tensor). torch
        takes the pair when ``y.s > 1e-10`` (nearly always); when it does not, the caller computes the direction
        again from the memory as it was."""
        if d is None:  # the first iteration of all: the steepest descent
            d = -flat_grad
            return None, None, ([], [], [], 1), d, flat_grad.dot(d)
        y, s, ys = self._curvature(flat_grad, prev_flat_grad, d, t)
        memory = self._remember(memory, y, s, ys, history_size)
        d = self._two_loop(flat_grad, memory)
        return ys, s, memory, d, flat_grad.dot(d)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = closure()
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        d, t = state.get("d"), state.get("t")
        memory = (state.get("old_dirs"), state.get("old_stps"), state.get("ro"), state.get("H_diag"))
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
        # the first iteration's numbers, recorded now and read in one round trip: the loss, the stopping test, the
        # first step's scale (on the first iteration of all), the curvature and the candidate direction's slope
        first = state["n_iter"] == 0
        ys, _, next_memory, next_d, next_gtd = self._next_direction(
            flat_grad, prev_flat_grad, None if first else d, t, memory, history_size)
        loss, grad_max, grad_sum, ys_value, gtd_value = _floats(
            orig_loss, flat_grad.abs().max(), flat_grad.abs().sum() if first else None, ys, next_gtd)
        if grad_max <= tolerance_grad:
            return orig_loss

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1 or ys_value > 1e-10:  # the pair (y, s) goes into the memory
                memory, d, gtd = next_memory, next_d, gtd_value
            else:  # (the candidate assumed it would: the direction from the memory as it was)
                d = self._two_loop(flat_grad, memory)
                gtd = float(flat_grad.dot(d))
            prev_flat_grad = alias(flat_grad)
            prev_loss = loss
            # step length: the first iteration is scaled by the gradient's 1-norm
            t = min(1.0, 1.0 / grad_sum) * lr if state["n_iter"] == 1 else lr
            if gtd > -tolerance_change:  # not a descent direction
                break

            ls_func_evals = 0
            new_loss = None  # (the loss of a re-evaluation without a line search, read below with the rest)
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
            else:
                self._add_grad(t, d)
                if n_iter != max_iter:
                    new_loss = closure()
                    flat_grad = self._gather_flat_grad()
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            opt_cond, step_max = False, None
            if line_search_fn is not None or new_loss is not None:
                # the stopping tests' numbers and, when another iteration may follow, its curvature and candidate
                # direction's slope, read in one round trip
                if n_iter < max_iter and current_evals < max_eval:
                    ys, s, next_memory, next_d, next_gtd = self._next_direction(
                        flat_grad, prev_flat_grad, d, t, memory, history_size)
                else:
                    s, ys, next_gtd = d * t, None, None
                loss_value, grad_max, step_max, ys_value, gtd_value = _floats(
                    new_loss, flat_grad.abs().max(), s.abs().max(), ys, next_gtd)
                loss = loss if new_loss is None else loss_value
                opt_cond = grad_max <= tolerance_grad

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if step_max <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        old_dirs, old_stps, ro, H_diag = memory
        state.update(
            d=d,
            t=t,
            old_dirs=old_dirs,
            old_stps=old_stps,
            ro=ro,
            H_diag=H_diag,
            prev_flat_grad=prev_flat_grad,
            prev_loss=prev_loss,
        )
        return orig_loss
