"""Exact BCC for binary cells: importance sampling through the classifier's positive rate, no MCMC.

The binary model of ``bcc`` has three parameters and a likelihood that depends on them only through
``q = P(decision = 1) = tpr * p + fpr * (1 - p)``; ``s_m ~ Binomial(n_m, q)`` is, as a function of ``q``,
proportional to the density of ``Beta(s_m + 1, n_m - s_m + 1)``. So the posterior is sampled exactly (up to
Monte-Carlo error) without a Markov chain:

1. draw ``p`` from its prior ``Beta(s_h + 1, B - s_h + 1)`` and ``q`` from ``g = Beta(s_m + 1, n_m - s_m + 1)``;
2. with probability 1/2 draw ``fpr`` from its prior and solve ``q`` for ``tpr = (q - (1 - p) fpr) / p``
   (proposal A), otherwise draw ``tpr`` from its prior and solve for ``fpr = (q - p tpr) / (1 - p)`` (proposal B);
3. weigh each draw by target / proposal density in ``(p, tpr, fpr)``. With ``L(q) = c g(q)`` the prior of ``p`` and
   ``g`` cancel, and the change of variables contributes ``|dq/dtpr| = p`` (A) and ``|dq/dfpr| = 1 - p`` (B)::

       w = pi_t(tpr) pi_f(fpr) / (0.5 p pi_f(fpr) + 0.5 (1 - p) pi_t(tpr)),   0 < tpr, fpr < 1 (else 0)

The mixture of A and B keeps the weights bounded (``w <= 2 pi_t / p`` and ``w <= 2 pi_f / (1 - p)``) and efficient
whichever of the two rates the data pin down less: A is good when ``p`` is large, B when it is small. Cells whose
Kish effective sample size ``(sum w)^2 / sum w^2`` is below ``ExactConfig.target_ess`` get more proposals (as many as
their efficiency so far says they need, up to ``max_proposals``); after the pilot round the proposal of ``p`` is a
Beta fitted to the weighted draws so far (1.5 times wider, mixed with 10% of the prior, which bounds the weights). The posterior mean of ``p`` is the self-normalised weighted mean; its Monte-Carlo
standard error is ``sqrt(sum wn^2 (p - mean)^2)`` with normalised weights ``wn``; the returned draws are a
systematic resample of the weighted draws.
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
#: The adapted proposal of ``p`` has this many times the posterior standard deviation (heavier than the target).
WIDEN = 1.5


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


def _beta_logpdf(x: np.ndarray, a: np.ndarray, b: np.ndarray, log_norm: np.ndarray) -> np.ndarray:
    """Log density of Beta(a, b) at ``x`` in (0, 1) (``log_norm = betaln(a, b)``, broadcast per cell)."""
    return (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - log_norm


def _mixture(x: np.ndarray, prior: dict[str, np.ndarray], rate: str) -> tuple[np.ndarray, np.ndarray]:
    """Log densities at ``x`` of the prior of ``rate`` and of its proposal, the defensive mixture
    ``DEFENSIVE * prior + (1 - DEFENSIVE) * adapted`` (keys ``a_<rate>``, ``b_<rate>`` and ``h<rate>_a`` ...)."""
    log_prior = _beta_logpdf(x, prior[f"a_{rate}"], prior[f"b_{rate}"], prior[f"n_{rate}"])
    log_adapted = _beta_logpdf(x, prior[f"h{rate}_a"], prior[f"h{rate}_b"], prior[f"h{rate}_n"])
    return log_prior, np.logaddexp(np.log(DEFENSIVE) + log_prior, np.log1p(-DEFENSIVE) + log_adapted)


def _draw(prior: dict[str, np.ndarray], rate: str, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws of ``rate``'s proposal where ``mask`` (elsewhere filler from the same call)."""
    from_prior = rng.random(mask.shape) < DEFENSIVE
    a = np.where(from_prior, prior[f"a_{rate}"], prior[f"h{rate}_a"])
    b = np.where(from_prior, prior[f"b_{rate}"], prior[f"h{rate}_b"])
    return rng.beta(a, b)


def _propose(prior: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``n`` weighted proposals for each cell of ``prior`` (arrays of shape ``(k, 1)``): ``p, tpr, fpr, log w``.

    ``p``, ``q`` and the rate drawn directly (``fpr`` in A, ``tpr`` in B) come from defensive mixtures of their
    priors (for ``q``: ``g``) and their adapted proposals (see ``_mixture``; before adaptation both parts are the
    prior). The weight is target / proposal with ``L(q) = c g(q)``.
    """
    k = prior["a_p"].shape[0]
    p = _draw(prior, "p", np.ones((k, n), dtype=bool), rng)
    q = _draw(prior, "q", np.ones((k, n), dtype=bool), rng)
    use_a = rng.random((k, n)) < 0.5
    x_f, x_t = _draw(prior, "f", use_a, rng), _draw(prior, "t", ~use_a, rng)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        tpr = np.where(use_a, (q - (1 - p) * x_f) / p, x_t)
        fpr = np.where(use_a, x_f, (q - p * tpr) / (1 - p))
        valid = (tpr > 0) & (tpr < 1) & (fpr > 0) & (fpr < 1) & (p > 0) & (p < 1)
        t_ok, f_ok, p_ok = np.where(valid, tpr, 0.5), np.where(valid, fpr, 0.5), np.where(valid, p, 0.5)
        lq, hq = _mixture(np.where(valid, q, 0.5), prior, "q")
        lp, hp = _mixture(p_ok, prior, "p")
        lt, ht = _mixture(t_ok, prior, "t")
        lf, hf = _mixture(f_ok, prior, "f")
        log_mix = np.logaddexp(np.log(p_ok) + hf, np.log1p(-p_ok) + ht) - np.log(2.0)
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


def _summary(p: np.ndarray, tpr: np.ndarray, fpr: np.ndarray, log_w: np.ndarray) -> np.ndarray:
    """Of one cell: weighted mean of ``p``, its Monte-Carlo standard error, the Kish ESS, and the weighted means
    and variances of ``p``, ``tpr``, ``fpr`` and ``q`` (NaN, and an ESS of 0, when no proposal has weight)."""
    if not np.isfinite(log_w).any():
        return np.array([np.nan, np.nan, 0.0, *[np.nan] * 8])
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    out = [np.nan, np.nan, float(1.0 / np.sum(w**2))]
    for x in (p, tpr, fpr, tpr * p + fpr * (1 - p)):
        mean = float(np.dot(w, x))
        out += [mean, float(np.dot(w, (x - mean) ** 2))]
    out[0], out[1] = out[3], float(np.sqrt(np.sum(w**2 * (p - out[3]) ** 2)))
    return np.array(out)


def _resample(log_w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a systematic resample of size ``n`` (one uniform offset; low variance, unbiased)."""
    w = np.exp(log_w - log_w.max())
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    positions = (rng.random() + np.arange(n)) / n
    idx = np.searchsorted(cdf, positions, side="right")
    return rng.permutation(np.minimum(idx, len(cdf) - 1))


def _next_round(ess: float, total: int, cfg: ExactConfig) -> int:
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
    stats = np.zeros((k, 11))  # per cell: mean, mcse, ess of p; mean and variance of p, tpr, fpr, q
    groups: dict[int, list[int]] = {min(PILOT, cfg.proposals): list(range(k))}
    while groups:
        for n, rows in groups.items():
            draws = _propose({key: v[rows] for key, v in prior.items()}, n, rng)
            for i, cell in enumerate(rows):
                chunks[cell].append(tuple(d[i] for d in draws))
                total[cell] += n
                stats[cell] = _summary(*_joined(chunks[cell], (0, 1, 2, 3)))
        todo, groups = [c for rows in groups.values() for c in rows], {}
        for cell in todo:
            n = cfg.proposals if len(chunks[cell]) == 1 else _next_round(stats[cell, 2], total[cell], cfg)
            if stats[cell, 2] >= cfg.target_ess or n <= 0:
                continue
            if np.isfinite(stats[cell, 0]):
                for j, rate in enumerate(("p", "t", "f", "q")):
                    _set_proposal(prior, cell, rate, stats[cell, 3 + 2 * j], stats[cell, 4 + 2 * j])
            groups.setdefault(n, []).append(cell)
    out = {name: np.full((k, cfg.draws), np.nan) for name in ("p", "tpr", "fpr")}
    for cell in range(k):
        p, tpr, fpr, log_w = _joined(chunks[cell], (0, 1, 2, 3))
        if np.isfinite(log_w).any():
            idx = _resample(log_w, cfg.draws, rng)
            out["p"][cell], out["tpr"][cell], out["fpr"][cell] = p[idx], tpr[idx], fpr[idx]
    return ExactResult(out["p"], out["tpr"], out["fpr"], stats[:, 0], stats[:, 1], stats[:, 2], total)


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
