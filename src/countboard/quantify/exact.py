"""Exact BCC for binary cells: importance sampling through the classifier's positive rate, no MCMC.

The binary model of ``bcc`` has three parameters and a likelihood that depends on them only through
``q = P(decision = 1) = tpr * p + fpr * (1 - p)``; ``s_m ~ Binomial(n_m, q)`` is, as a function of ``q``,
proportional to the density ``g`` of ``Beta(s_m + 1, n_m - s_m + 1)``. So the posterior is sampled exactly (up to
Monte-Carlo error, which is reported) without a Markov chain:

1. draw ``p`` and ``q`` (first from the prior of ``p`` and from ``g``);
2. with probability 1/2 draw ``fpr`` and solve ``q`` for ``tpr = (q - (1 - p) fpr) / p`` (proposal A), otherwise
   draw ``tpr`` and solve for ``fpr = (q - p tpr) / (1 - p)`` (proposal B);
3. weigh each draw by target / proposal density in ``(p, tpr, fpr)``; the change of variables contributes
   ``|dq/dtpr| = p`` (A) and ``|dq/dfpr| = 1 - p`` (B), and ``L(q) = c g(q)``::

       w = pi_p(p) pi_t(tpr) pi_f(fpr) g(q) / (h_p(p) h_q(q) [0.5 p h_f(fpr) + 0.5 (1 - p) h_t(tpr)])

   with ``pi`` the priors and ``h`` the proposals; ``w = 0`` outside ``0 < tpr, fpr < 1``.

The mixture of A and B suits whichever rate the data pin down less (A when ``p`` is large, B when it is small).
A pilot round draws every rate from its prior (and ``q`` from ``g``, so that ``w`` reduces to
``pi_t pi_f / (0.5 p pi_f + 0.5 (1 - p) pi_t)``); later rounds draw from Betas fitted to the weighted draws so far
(``WIDEN`` times wider), each mixed with ``DEFENSIVE`` = 10% of its prior, which bounds the weights. This matters
when the human labels and the classifier disagree and the posterior sits in the tails of the priors. Cells whose
Kish effective sample size ``(sum w)^2 / sum w^2`` is below ``ExactConfig.target_ess`` get more proposals (as many
as their efficiency so far says they need, up to ``max_proposals``). The posterior mean of ``p`` is the
self-normalised weighted mean; its Monte-Carlo standard error is ``sqrt(sum w^2 (p - mean)^2) / sum w``; the
returned draws are a systematic resample of the weighted draws (in random order, so that the draws of different
cells are independent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaln

#: Cells fitted together in one block of proposals (bounds memory: block * proposals * 8 bytes per array).
BLOCK_CELLS = 32
#: Proposals per cell of the pilot round, drawn with ``p`` from its prior.
PILOT = 2048
#: Smallest round of extra proposals (and their granularity).
ROUND_MIN = 1024
#: Largest round, in multiples of ``ExactConfig.proposals``.
ROUND_MAX_FACTOR = 4
#: Share of the proposals of ``p`` drawn from its prior after the pilot (keeps the weights bounded by 1 / DEFENSIVE).
DEFENSIVE = 0.1
LOG_DEFENSIVE, LOG_ADAPTED = np.log(DEFENSIVE), np.log1p(-DEFENSIVE)
#: The adapted proposal of ``p`` has this many times the posterior standard deviation (heavier than the target).
WIDEN = 1.3


@dataclass(frozen=True)
class ExactConfig:
    """Importance-sampling settings of the exact binary BCC.

    Attributes:
        proposals: Proposals per cell in the first round.
        target_ess: Kish effective sample size each cell should reach; cells below it get more proposals.
        max_proposals: Most proposals per cell (a ``BCCWarning`` names cells still below ``target_ess``).
        draws: Resampled draws of ``p`` (and ``tpr``, ``fpr``) returned per cell.
        seed: Seed of the proposals and the resampling.
    """

    proposals: int = 4096
    target_ess: float = 4000.0
    max_proposals: int = 1 << 20
    draws: int = 2000
    seed: int | None = 0


@dataclass
class ExactResult:
    """Per cell (first axis): resampled draws, weighted posterior mean and its Monte-Carlo error, Kish ESS."""

    p: np.ndarray
    tpr: np.ndarray
    fpr: np.ndarray
    mean: np.ndarray
    mcse: np.ndarray
    ess: np.ndarray
    proposals: np.ndarray


def _logs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.log(x), np.log1p(-x)


def _mixture(logs: tuple[np.ndarray, np.ndarray], prior: dict[str, np.ndarray], rate: str
             ) -> tuple[np.ndarray, np.ndarray]:
    """Log densities, at the point whose ``(log x, log(1 - x))`` are ``logs``, of the prior of ``rate`` and of its
    proposal, the defensive mixture ``DEFENSIVE * prior + (1 - DEFENSIVE) * adapted`` (Beta parameters under the
    keys ``a_<rate>``, ``b_<rate>``, ``n_<rate> = betaln(a, b)`` and ``h<rate>_a``, ``h<rate>_b``, ``h<rate>_n``)."""
    lx, l1x = logs
    log_prior = (prior[f"a_{rate}"] - 1) * lx + (prior[f"b_{rate}"] - 1) * l1x - prior[f"n_{rate}"]
    log_adapted = (prior[f"h{rate}_a"] - 1) * lx + (prior[f"h{rate}_b"] - 1) * l1x - prior[f"h{rate}_n"]
    return log_prior, np.logaddexp(LOG_DEFENSIVE + log_prior, LOG_ADAPTED + log_adapted)


def _params(prior: dict[str, np.ndarray], rate: str, from_prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per draw, the Beta parameters of ``rate``'s prior (where ``from_prior``) or of its adapted proposal."""
    return (np.where(from_prior, prior[f"a_{rate}"], prior[f"h{rate}_a"]),
            np.where(from_prior, prior[f"b_{rate}"], prior[f"h{rate}_b"]))


def _propose(prior: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``n`` weighted proposals for each cell of ``prior`` (arrays of shape ``(k, 1)``): ``p, tpr, fpr, log w``.

    ``p``, ``q`` and the rate drawn directly (``fpr`` in A, ``tpr`` in B) come from defensive mixtures of their
    priors (for ``q``: ``g``) and their adapted proposals (see ``_mixture``; before adaptation both parts are the
    prior). The weight is target / proposal with ``L(q) = c g(q)``.
    """
    k = prior["a_p"].shape[0]
    u = rng.random((4, k, n))
    from_prior, use_a = u[:3] < DEFENSIVE, u[3] < 0.5
    p = rng.beta(*_params(prior, "p", from_prior[0]))
    q = rng.beta(*_params(prior, "q", from_prior[1]))
    # one Beta call for the rate drawn directly: fpr's proposal in A, tpr's in B
    a_f, b_f = _params(prior, "f", from_prior[2])
    a_t, b_t = _params(prior, "t", from_prior[2])
    x = rng.beta(np.where(use_a, a_f, a_t), np.where(use_a, b_f, b_t))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tpr = np.where(use_a, (q - (1 - p) * x) / p, x)
        fpr = np.where(use_a, x, (q - p * tpr) / (1 - p))
        valid = (tpr > 0) & (tpr < 1) & (fpr > 0) & (fpr < 1) & (p > 0) & (p < 1)
        log_p = _logs(np.where(valid, p, 0.5))
        lq, hq = _mixture(_logs(np.where(valid, q, 0.5)), prior, "q")
        lp, hp = _mixture(log_p, prior, "p")
        lt, ht = _mixture(_logs(np.where(valid, tpr, 0.5)), prior, "t")
        lf, hf = _mixture(_logs(np.where(valid, fpr, 0.5)), prior, "f")
        log_mix = np.logaddexp(log_p[0] + hf, log_p[1] + ht) - np.log(2.0)
    log_w = np.where(valid, lp + lt + lf + lq - hp - hq - log_mix, -np.inf)
    return p, tpr, fpr, log_w


def _set_proposal(prior: dict[str, np.ndarray], cell: int, rate: str, mean: float, var: float) -> None:
    """Point the adapted proposal of ``rate`` of ``cell`` at a Beta with ``mean`` and WIDEN times the sd."""
    mean = min(max(mean, 1e-6), 1 - 1e-6)
    var = min(max(var * WIDEN**2, 1e-12), mean * (1 - mean) * 0.5)  # a + b > 1: proper, unimodal or flat
    common = mean * (1 - mean) / var - 1
    prior[f"h{rate}_a"][cell, 0], prior[f"h{rate}_b"][cell, 0] = mean * common, (1 - mean) * common
    prior[f"h{rate}_n"][cell, 0] = betaln(mean * common, (1 - mean) * common)


def _priors(counts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Beta parameters of the model per cell, as ``(K, 1)`` columns; the first proposals are the priors."""
    tp, fn, fp, tn, s_m, n_m = (counts[k].astype(np.float64) for k in ("tp", "fn", "fp", "tn", "s_m", "n_m"))
    s_h, b = tp + fn, tp + fn + fp + tn
    prior = {"a_p": s_h + 1, "b_p": b - s_h + 1, "a_t": tp + 1, "b_t": fn + 1, "a_f": fp + 1, "b_f": tn + 1,
             "a_q": s_m + 1, "b_q": n_m - s_m + 1}
    for rate in ("p", "t", "f", "q"):
        prior[f"n_{rate}"] = betaln(prior[f"a_{rate}"], prior[f"b_{rate}"])
        for src_key, key in (("a", "_a"), ("b", "_b"), ("n", "_n")):
            prior[f"h{rate}{key}"] = prior[f"{src_key}_{rate}"].copy()
    return {k: v[:, None] for k, v in prior.items()}


class _Sums:
    """Running weighted sums per cell, rescaled to each cell's largest log weight so far.

    Per cell: ``s0 = sum w``, ``s00 = sum w^2``, ``s1[j] = sum w x_j``, ``s2[j] = sum w x_j^2`` for
    ``x = (p, tpr, fpr, q)``, and ``s01 = sum w^2 p``, ``s02 = sum w^2 p^2`` for the Monte-Carlo error of the mean.
    """

    def __init__(self, k: int):
        self.top = np.full(k, -np.inf)
        self.s0, self.s00, self.s01, self.s02 = (np.zeros(k) for _ in range(4))
        self.s1, self.s2 = np.zeros((4, k)), np.zeros((4, k))

    def add(self, rows: np.ndarray, p: np.ndarray, tpr: np.ndarray, fpr: np.ndarray, log_w: np.ndarray) -> None:
        top = np.maximum(self.top[rows], log_w.max(axis=1))
        finite = np.isfinite(top)
        top_safe = np.where(finite, top, 0.0)
        with np.errstate(invalid="ignore"):
            old = np.where(np.isfinite(self.top[rows]), np.exp(self.top[rows] - top_safe), 0.0)
        w = np.exp(log_w - top_safe[:, None])
        w2 = w * w
        self.top[rows] = top
        self.s0[rows] = self.s0[rows] * old + w.sum(axis=1)
        self.s00[rows] = self.s00[rows] * old**2 + w2.sum(axis=1)
        self.s01[rows] = self.s01[rows] * old**2 + (w2 * p).sum(axis=1)
        self.s02[rows] = self.s02[rows] * old**2 + (w2 * p * p).sum(axis=1)
        for j, x in enumerate((p, tpr, fpr, tpr * p + fpr * (1 - p))):
            x = np.where(np.isfinite(log_w), x, 0.0)
            self.s1[j, rows] = self.s1[j, rows] * old + (w * x).sum(axis=1)
            self.s2[j, rows] = self.s2[j, rows] * old + (w * x * x).sum(axis=1)

    def ess(self) -> np.ndarray:
        """Kish effective sample size per cell (0 where no proposal has weight)."""
        return np.divide(self.s0**2, self.s00, out=np.zeros_like(self.s0), where=self.s0 > 0)

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """``(4, k)`` weighted means and variances of ``p, tpr, fpr, q`` (NaN where no proposal has weight)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.s1 / self.s0
            return mean, np.maximum(self.s2 / self.s0 - mean**2, 0.0)

    def mcse(self) -> np.ndarray:
        """Monte-Carlo standard error of the weighted mean of ``p``: ``sqrt(sum w^2 (p - mean)^2) / sum w``."""
        mean = self.moments()[0][0]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(np.maximum(self.s02 - 2 * mean * self.s01 + mean**2 * self.s00, 0.0)) / self.s0


def resample_indices(log_w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a systematic resample of size ``n`` (one uniform offset; low variance, unbiased)."""
    w = np.exp(log_w - log_w.max())
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    positions = (rng.random() + np.arange(n)) / n
    idx = np.searchsorted(cdf, positions, side="right")
    return rng.permutation(np.minimum(idx, len(cdf) - 1))


def next_round(ess: float, total: int, cfg: ExactConfig) -> int:
    """Proposals for a cell's next round: what its efficiency so far (ESS per proposal) says it needs, with a 20%
    margin, rounded up to a power of two times ``ROUND_MIN`` (so that cells share rounds), within the budget."""
    need = (cfg.target_ess - ess) / max(ess / total, 1e-3) * 1.2
    n = ROUND_MIN * 2 ** int(np.ceil(np.log2(max(need / ROUND_MIN, 1.0))))
    # a round at most ROUND_MAX_FACTOR times the first: a poorly adapted proposal is re-fitted before much is spent
    return int(min(n, ROUND_MAX_FACTOR * cfg.proposals, cfg.max_proposals - total))


def _joined(chunk_list: list[tuple[np.ndarray, ...]], fields: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    if len(chunk_list) == 1:
        return tuple(chunk_list[0][f] for f in fields)
    return tuple(np.concatenate([c[f] for c in chunk_list]) for f in fields)


def _fit_block(prior: dict[str, np.ndarray], cfg: ExactConfig, rng: np.random.Generator) -> ExactResult:
    """Fit the cells of one block: a pilot round from the prior of ``p``, then rounds from the adapted proposal
    (sized by each cell's efficiency so far) until each cell reaches the target ESS or ``max_proposals``."""
    k = prior["a_p"].shape[0]
    chunks: list[list[tuple[np.ndarray, ...]]] = [[] for _ in range(k)]
    total = np.zeros(k, dtype=np.int64)
    sums = _Sums(k)
    groups: dict[int, np.ndarray] = {min(PILOT, cfg.proposals): np.arange(k)}
    while groups:
        for n, rows in groups.items():
            draws = _propose({key: v[rows] for key, v in prior.items()}, n, rng)
            sums.add(rows, *draws)
            total[rows] += n
            for i, cell in enumerate(rows):
                chunks[cell].append(tuple(d[i] for d in draws))
        todo, groups = np.concatenate(list(groups.values())), {}
        ess, (mean, var) = sums.ess(), sums.moments()
        for cell in todo:
            n = cfg.proposals if len(chunks[cell]) == 1 else next_round(ess[cell], total[cell], cfg)
            if ess[cell] >= cfg.target_ess or n <= 0:
                continue
            if np.isfinite(mean[0, cell]):
                for j, rate in enumerate(("p", "t", "f", "q")):
                    _set_proposal(prior, cell, rate, mean[j, cell], var[j, cell])
            groups.setdefault(n, []).append(cell)
        groups = {n: np.array(rows) for n, rows in groups.items()}
    out = {name: np.full((k, cfg.draws), np.nan) for name in ("p", "tpr", "fpr")}
    for cell in range(k):
        p, tpr, fpr, log_w = _joined(chunks[cell], (0, 1, 2, 3))
        if np.isfinite(log_w).any():
            idx = resample_indices(log_w, cfg.draws, rng)
            out["p"][cell], out["tpr"][cell], out["fpr"][cell] = p[idx], tpr[idx], fpr[idx]
    return ExactResult(out["p"], out["tpr"], out["fpr"], sums.moments()[0][0], sums.mcse(), sums.ess(), total)


def fit_exact(counts: dict[str, np.ndarray], cfg: ExactConfig | None = None) -> ExactResult:
    """Posterior of K binary BCC cells by importance sampling (see the module docstring).

    Args:
        counts: Validated ``(K,)`` int arrays ``tp, fn, fp, tn, s_m, n_m`` (``bcc.validate_counts``).
        cfg: Proposal, ESS and resampling settings.

    Returns:
        An ``ExactResult`` with ``(K, cfg.draws)`` resampled draws of ``p``, ``tpr`` and ``fpr`` and, per cell, the
        weighted posterior mean of ``p``, its Monte-Carlo standard error, the Kish ESS and the proposals used.

    Example:
        >>> c = {k: np.array([v]) for k, v in dict(tp=40, fn=10, fp=5, tn=45, s_m=4500, n_m=9900).items()}
        >>> r = fit_exact(c)
        >>> bool(0.45 < r.mean[0] < 0.57), bool(r.mcse[0] < 0.001)
        (True, True)
    """
    cfg = cfg or ExactConfig()
    if cfg.proposals < 1 or cfg.draws < 1 or cfg.max_proposals < cfg.proposals:
        raise ValueError(f"ExactConfig needs proposals >= 1, draws >= 1 and max_proposals >= proposals, got {cfg}")
    prior = _priors(counts)
    rng = np.random.default_rng(cfg.seed)
    k = prior["a_p"].shape[0]
    parts = [_fit_block({key: v[i:i + BLOCK_CELLS].copy() for key, v in prior.items()}, cfg, rng)
             for i in range(0, k, BLOCK_CELLS)]
    return ExactResult(*(np.concatenate([getattr(r, f) for r in parts])
                         for f in ("p", "tpr", "fpr", "mean", "mcse", "ess", "proposals")))
