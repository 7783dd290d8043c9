"""Exact multi-class BCC: the Dirichlet model's posterior by importance sampling through ``q = pi @ theta``.

The model (``quantify.multiclass``), with ``a = C.sum(1) + 1`` and ``b[l] = C[l] + 1``::

    pi ~ Dirichlet(a),  theta[l] ~ Dirichlet(b[l]),  s ~ Multinomial(n_m, q),  q = pi @ theta

The likelihood depends on ``(pi, theta)`` only through ``q``, and ``Multinomial(s | n_m, q)`` is, in ``q``,
proportional to the density ``g`` of ``Dirichlet(s + 1)``. For a given ``theta`` the map ``pi -> q = theta^T pi``
is linear and takes the simplex into itself, so ``(theta, q)`` are coordinates of the posterior with
``pi = theta^-T q`` and the Jacobian ``|dq / dpi| = |det theta|`` (``theta^T`` keeps ``1^T``, so its determinant
on the simplex's plane is its full determinant). Equally, for given ``pi`` and the other rows, ``q`` fixes row
``l``: ``theta[l] = (q - sum_{k != l} pi_k theta[k]) / pi_l`` with the Jacobian ``pi_l^(L-1)``. Each proposal:

1. draws ``pi``, every row ``theta[l]`` and ``q``, and a scheme: with probability 1/2 it solves ``pi`` from
   ``q`` and ``theta``, otherwise a row ``l`` (uniform) from ``q``, ``pi`` and the other rows;
2. has weight 0 when the solved ``pi`` or row leaves the simplex;
3. is weighed by target / the mixture of the ``L + 1`` schemes' proposal densities in ``(pi, theta)``::

       w = D(pi; a) prod_l D(theta[l]; b[l]) g(q) / sum_m c_m h_m(pi, theta)
       h_pi = h(theta) h(q) |det theta|,   h_l = h(pi) prod_{k != l} h(theta[k]) h(q) pi_l^(L-1)

   (``D``: Dirichlet densities, ``h``: proposals, ``c``: the schemes' probabilities).

Solving ``pi`` suits well-known confusion rows; solving a row suits a dominant label, whose row the others hardly
move (the binary method solves ``tpr`` or ``fpr`` the same way). The first proposals are the priors, and for
``q`` the likelihood times a Dirichlet moment-matched to ``q`` under the priors (``_q_start``). Once the weighted
draws have an ESS of ``ADAPT_ESS``, each proposal is a Dirichlet moment-matched to them (``WIDEN`` times the
standard deviation), each mixed with ``DEFENSIVE`` = 10% of its prior (for ``q``: ``g``), which bounds the
weights. Rounds continue until the Kish effective sample size ``(sum w)^2 / sum w^2`` reaches
``ExactConfig.target_ess`` or ``max_proposals`` are spent. Reported: the self-normalised weighted means of ``pi``,
their Monte-Carlo errors ``sqrt(sum w^2 (pi - mean)^2) / sum w``, the ESS and a systematic resample of the draws.
Pure numpy / scipy: nothing is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, logsumexp

from countboard.quantify.exact import DEFENSIVE, PILOT, WIDEN, ExactConfig, next_round, resample_indices

LOG_DEFENSIVE, LOG_ADAPTED = np.log(DEFENSIVE), np.log1p(-DEFENSIVE)
#: Draws from the priors that the first proposal of ``q`` is moment-matched to.
PRIOR_DRAWS = 4096
#: Effective sample size the weighted draws need before the proposals are fitted to them.
ADAPT_ESS = 50.0
#: Proposals drawn in one array (bounds memory: chunk * (L + 1) * L * 8 bytes per array).
CHUNK = 1 << 16


@dataclass
class MultiExactResult:
    """Resampled ``(draws, L)`` prevalences, their weighted means and Monte-Carlo errors, the Kish ESS."""

    pi: np.ndarray
    mean: np.ndarray
    mcse: np.ndarray
    ess: float
    proposals: int


def log_dirichlet(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Log density of ``Dirichlet(alpha)`` at the points ``x`` (last axis: the ``L`` components).

    Example:
        >>> float(np.exp(log_dirichlet(np.array([0.2, 0.3, 0.5]), np.ones(3))))  # uniform on the simplex: (L-1)!
        2.0
    """
    norm = gammaln(alpha).sum(axis=-1) - gammaln(alpha.sum(axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((alpha - 1) * np.log(x)).sum(axis=-1) - norm


def _dirichlet(alpha: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One Dirichlet draw per row of ``alpha`` (any leading shape), by normalised Gammas."""
    g = rng.standard_gamma(alpha)
    return g / g.sum(axis=-1, keepdims=True)


def _matched(s0: float, s1: np.ndarray, s2: np.ndarray, widen: float = WIDEN) -> np.ndarray:
    """Dirichlet parameters with the weighted mean ``s1 / s0`` of some points (last axis: the components) and
    ``widen`` times their standard deviation (one concentration per leading row, from the summed variances), at
    least 1 each (so the proposal's density is bounded, as every prior of the model is)."""
    mean = s1 / s0
    var = np.maximum(s2 / s0 - mean**2, 0.0) * widen**2
    spread = np.maximum(var.sum(axis=-1, keepdims=True), 1e-12)
    conc = np.maximum((mean * (1 - mean)).sum(axis=-1, keepdims=True) / spread - 1, 1.0)
    return np.maximum(mean * conc, 1.0)


class _Sampler:
    """The proposals of one cell: the model's Dirichlet parameters, the adapted ones, the draws of ``pi`` so far
    and running weighted sums of ``pi``, ``theta`` and ``q`` (rescaled to the largest log weight so far)."""

    def __init__(self, a_pi: np.ndarray, a_theta: np.ndarray, s: np.ndarray, rng: np.random.Generator):
        self.rng = rng
        self.prior = {"pi": a_pi, "theta": a_theta, "q": s + 1.0}  # the defensive proposals (for q: g)
        # until adapt(): the priors, and for q the likelihood times the prior's q, moment-matched (see _q_start)
        self.adapted = {"pi": a_pi.copy(), "theta": a_theta.copy(), "q": self._q_start(s)}
        n_labels = len(a_pi)
        # scheme l < L solves row l of theta, scheme L solves pi; half the draws solve pi
        self.log_c = np.log(np.r_[np.full(n_labels, 0.5 / n_labels), 0.5])
        self.pi: list[np.ndarray] = []
        self.log_w: list[np.ndarray] = []
        self.top = -np.inf
        self.sums = {"w": 0.0, **{k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.prior.items()}}

    def _q_start(self, s: np.ndarray) -> np.ndarray:
        """The first proposal of ``q``: ``Dirichlet(c m + s)``, the likelihood ``g`` times a Dirichlet ``(c m)``
        moment-matched to ``q = pi @ theta`` under the priors, ``WIDEN`` times wider. Where the labelled items
        outnumber the unlabelled ones, the posterior of ``q`` lies far inside ``g`` and this finds it."""
        n = PRIOR_DRAWS
        pi = _dirichlet(np.broadcast_to(self.prior["pi"], (n, len(s))), self.rng)
        theta = _dirichlet(np.broadcast_to(self.prior["theta"], (n,) + self.prior["theta"].shape), self.rng)
        q = np.einsum("nk,nkj->nj", pi, theta)
        alpha = _matched(float(n), q.sum(axis=0), (q * q).sum(axis=0), widen=1.0) + s
        conc = alpha.sum()
        return np.maximum(alpha / conc * ((conc + 1) / WIDEN**2 - 1), 1.0)

    def _draw(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Draws of ``name`` from its defensive mixture: ``DEFENSIVE`` of them from the pilot's Dirichlet."""
        from_prior = (self.rng.random(shape) < DEFENSIVE)[..., None]
        return _dirichlet(np.where(from_prior, self.prior[name], self.adapted[name]), self.rng)

    def _log_h(self, name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log densities at ``x`` of ``name``'s prior (pilot) Dirichlet and of its defensive mixture."""
        log_prior = log_dirichlet(x, self.prior[name])
        return log_prior, np.logaddexp(LOG_DEFENSIVE + log_prior, LOG_ADAPTED + log_dirichlet(x, self.adapted[name]))

    def propose(self, n: int) -> None:
        """``n`` weighted proposals (in chunks of ``CHUNK``)."""
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                pi, log_w, theta, q = self._weigh(*self._propose(m))
            self.pi.append(pi)
            self.log_w.append(log_w)
            self._add(log_w, pi=pi, theta=theta, q=q)

    def _propose(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m`` points ``(pi, theta, q)``: each draw's scheme solves ``pi`` or one row of ``theta`` from ``q``."""
        n_labels = len(self.prior["pi"])
        scheme = self.rng.choice(n_labels + 1, size=m, p=np.exp(self.log_c))
        pi, theta, q = self._draw("pi", (m,)), self._draw("theta", (m, n_labels)), self._draw("q", (m,))
        rows = np.flatnonzero(scheme < n_labels)
        if rows.size:  # theta[l] = (q - sum_{k != l} pi_k theta[k]) / pi_l
            ls = scheme[rows]
            own = pi[rows, ls, None] * theta[rows, ls]
            theta[rows, ls] = (q[rows] - np.einsum("nk,nkj->nj", pi[rows], theta[rows]) + own) / pi[rows, ls, None]
        solve = np.flatnonzero(scheme == n_labels)
        if solve.size:  # pi = theta^-T q
            tt = np.swapaxes(theta[solve], -1, -2)
            singular = np.abs(np.linalg.det(tt)) < 1e-300
            tt[singular] = np.eye(n_labels)
            pi[solve] = np.where(singular[:, None], -1.0, np.linalg.solve(tt, q[solve, :, None])[..., 0])
        return pi, theta, q

    def _weigh(self, pi: np.ndarray, theta: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, ...]:
        """The log weight of each point, target / mixture of the schemes' densities (``-inf`` off the simplex)."""
        ok = np.all(pi > 0, axis=-1) & np.all(theta > 0, axis=(-1, -2)) & np.all(q > 0, axis=-1)
        n_labels = pi.shape[-1]
        pi = np.where(ok[:, None], pi, 1.0 / n_labels)
        # a point off the simplex gets weight 0; a filler inside it keeps the arithmetic below finite
        theta = np.where(ok[:, None, None], theta, 0.5 * np.eye(n_labels) + 0.5 / n_labels)
        q = np.where(ok[:, None], q, 1.0 / n_labels)
        pi /= pi.sum(axis=-1, keepdims=True)  # the solved rows and pi sum to 1 up to rounding
        theta /= theta.sum(axis=-1, keepdims=True)
        lp_pi, lh_pi = self._log_h("pi", pi)
        lp_theta, lh_theta = self._log_h("theta", theta)
        lg_q, lh_q = self._log_h("q", q)
        logdet = np.linalg.slogdet(theta)[1]
        # in (pi, theta): solving pi has the Jacobian |det theta|, solving row l has pi_l^(L-1)
        rest = lh_theta.sum(axis=-1, keepdims=True) - lh_theta + lh_pi[:, None] + (n_labels - 1) * np.log(pi)
        log_g = np.concatenate([rest, (lh_theta.sum(axis=-1) + logdet)[:, None]], axis=-1) + lh_q[:, None]
        log_w = lp_pi + lp_theta.sum(axis=-1) + lg_q - logsumexp(log_g + self.log_c, axis=-1)
        return pi, np.where(ok & np.isfinite(log_w), log_w, -np.inf), theta, q

    def _add(self, log_w: np.ndarray, **points: np.ndarray) -> None:
        top = max(self.top, float(log_w.max()))
        if not np.isfinite(top):
            return
        scale = np.exp(self.top - top) if np.isfinite(self.top) else 0.0
        w = np.exp(log_w - top)
        self.sums["w"] = self.sums["w"] * scale + w.sum()
        for name, x in points.items():
            s1, s2 = self.sums[name]
            self.sums[name] = (s1 * scale + np.tensordot(w, x, axes=1), s2 * scale + np.tensordot(w, x * x, axes=1))
        self.top = top

    def adapt(self, ess: float) -> None:
        """Point the adapted proposals at the weighted draws so far, once their ESS is ``ADAPT_ESS`` (fewer
        draws with weight understate the posterior's spread: a proposal fitted to them would be too narrow)."""
        if ess >= ADAPT_ESS:
            self.adapted = {k: _matched(self.sums["w"], *self.sums[k]) for k in self.prior}

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """All draws of ``pi`` so far and their weights scaled to a largest weight of 1 (zeros if none counts)."""
        pi, log_w = np.concatenate(self.pi), np.concatenate(self.log_w)
        top = log_w.max()
        return pi, (np.exp(log_w - top) if np.isfinite(top) else np.zeros_like(log_w))


def _summary(pi: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Weighted means of ``pi``, their Monte-Carlo errors and the Kish ESS."""
    s0 = w.sum()
    if s0 <= 0:
        nan = np.full(pi.shape[-1], np.nan)
        return nan, nan, 0.0
    mean = w @ pi / s0
    mcse = np.sqrt((w**2) @ (pi - mean) ** 2) / s0
    return mean, mcse, float(s0**2 / (w**2).sum())


def fit_exact_multiclass(conf: np.ndarray, s: np.ndarray, cfg: ExactConfig | None = None) -> MultiExactResult:
    """Posterior of the prevalences of one multi-class cell by importance sampling (see the module docstring).

    Args:
        conf: Validated ``(L, L)`` confusion counts (rows: human label, columns: classifier label).
        s: Validated ``(L,)`` classifier label counts of the unlabelled items.
        cfg: Proposal, ESS and resampling settings (those of the binary method).

    Example:
        >>> r = fit_exact_multiclass(np.array([[30, 5, 5], [4, 20, 6], [2, 3, 25]]), np.array([3000, 3000, 3900]))
        >>> r.pi.shape, bool(r.ess >= 4000), bool(r.mcse.max() < 0.003)
        ((2000, 3), True, True)
    """
    cfg = cfg or ExactConfig()
    if cfg.proposals < 1 or cfg.draws < 1 or cfg.max_proposals < cfg.proposals:
        raise ValueError(f"ExactConfig needs proposals >= 1, draws >= 1 and max_proposals >= proposals, got {cfg}")
    conf = np.asarray(conf, dtype=np.float64)
    rng = np.random.default_rng(cfg.seed)
    sampler = _Sampler(conf.sum(axis=1) + 1.0, conf + 1.0, np.asarray(s, dtype=np.float64), rng)
    total, n = 0, min(PILOT, cfg.proposals)
    while n > 0:
        sampler.propose(n)
        total += n
        pi, w = sampler.weights()
        ess = _summary(pi, w)[2]
        if ess >= cfg.target_ess:
            break
        sampler.adapt(ess)
        n = cfg.proposals if total == min(PILOT, cfg.proposals) else next_round(ess, total, cfg)
        n = min(n, cfg.max_proposals - total)
    mean, mcse, ess = _summary(pi, w)
    if ess > 0:
        with np.errstate(divide="ignore"):
            draws = pi[resample_indices(np.log(w), cfg.draws, rng)]
    else:
        draws = np.full((cfg.draws, pi.shape[-1]), np.nan)
    return MultiExactResult(pi=draws, mean=mean, mcse=mcse, ess=ess, proposals=total)
