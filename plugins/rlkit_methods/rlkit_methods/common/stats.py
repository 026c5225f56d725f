"""Masked statistics, whitening and running moments, the same on one or many processes.

One definition everywhere: mean and variance are population moments over the entries that
``mask`` keeps (all entries when there is no mask); given ``all_reduce`` (the engine's sum
over data-parallel ranks) the sums are reduced first, so two processes holding halves of a
batch get exactly what one process holding the whole batch gets.

    mean = sum(m * x) / sum(m)
    var  = sum(m * (x - mean)^2) / sum(m)
    whiten(x) = (x - mean) / sqrt(var + 1e-8)
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

AllReduce = Optional[Callable[[torch.Tensor], torch.Tensor]]


def masked_moments(
    xs: torch.Tensor, mask: torch.Tensor | None = None, *, all_reduce: AllReduce = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, population variance, count) of ``xs`` over ``mask`` (and over ranks)."""
    xs = xs if xs.dtype == torch.float64 else xs.float()  # float64 stays float64 (RunningMoments)
    m = torch.ones_like(xs) if mask is None else mask.to(xs.dtype)
    sums = torch.stack([(xs * m).sum(), m.sum()])  # (2,)
    if all_reduce is not None:
        sums = all_reduce(sums)
    total, count = sums[0], sums[1]
    mean = total / count.clamp(min=1)
    sq = ((xs - mean) ** 2 * m).sum()
    if all_reduce is not None:
        sq = all_reduce(sq.reshape(1))[0]
    var = sq / count.clamp(min=1)
    return mean, var, count


def masked_mean(xs: torch.Tensor, mask: torch.Tensor | None = None, dim: int | None = None) -> torch.Tensor:
    """sum(m * x) / max(sum(m), 1), over ``dim`` or over everything (this process only)."""
    if mask is None:
        return xs.mean() if dim is None else xs.mean(dim)
    m = mask.to(xs.dtype)
    if dim is None:
        return (xs * m).sum() / m.sum().clamp(min=1)
    return (xs * m).sum(dim) / m.sum(dim).clamp(min=1)


def whiten(
    xs: torch.Tensor, mask: torch.Tensor | bool | None = None, *, shift_mean: bool = True, all_reduce: AllReduce = None
) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the masked entries; masked-out entries become 0.

    With ``shift_mean=False`` the mean is added back (only the scale changes). trlX's call
    ``whiten(xs, shift_mean)`` reads the same: a bool in the second place is ``shift_mean``.
    """
    if isinstance(mask, bool):  # trlX's positional shift_mean, not a mask
        mask, shift_mean = None, mask
    mean, var, _ = masked_moments(xs, mask, all_reduce=all_reduce)
    whitened = (xs - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    if mask is not None:
        whitened = whitened * mask.to(whitened.dtype)
    return whitened


class RunningMoments:
    """Running mean and standard deviation of every score seen so far (Chan et al. merge).

    For a batch with mean mu_b, population variance var_b and count n_b::

        delta = mu_b - mu;   N = n + n_b
        mu   <- mu + delta * n_b / N
        var  <- (var * n + var_b * n_b + delta^2 * n * n_b / N) / N
        std  <- sqrt(var * N / (N - 1))          (unbiased)

    As trlX's: ``update`` returns the batch's (mean, unbiased std) as 0-d tensors, and
    ``mean``, ``var`` and ``std`` are tensors after the first update, in the batch's float
    dtype. The sums are kept in float64, so long runs do not drift.
    """

    def __init__(self) -> None:
        self.mean: Any = 0.0
        self.var: Any = 1.0
        self.std: Any = 1.0
        self.count = 1e-24
        self._moments = (0.0, 1.0)  # (mean, var) in float64

    def update(self, xs: torch.Tensor, mask: torch.Tensor | None = None, all_reduce: AllReduce = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Fold a batch in (every rank's); returns the batch's (mean, unbiased std)."""
        dtype = xs.dtype if xs.is_floating_point() else torch.float32
        xs_mean, xs_var, xs_count = (t.item() for t in masked_moments(xs.double(), mask, all_reduce=all_reduce))
        if xs_count == 0:
            return torch.tensor(float("nan"), dtype=dtype), torch.tensor(float("nan"), dtype=dtype)
        mean, var = self._moments
        delta = xs_mean - mean
        tot_count = self.count + xs_count
        old_sum = var * self.count + delta**2 * self.count * xs_count / tot_count
        mean += delta * xs_count / tot_count
        var = (old_sum + xs_var * xs_count) / tot_count
        std = (var * tot_count / max(tot_count - 1, 1e-24)) ** 0.5
        self._moments, self.count = (mean, var), tot_count
        self.mean, self.var, self.std = (torch.tensor(v, dtype=dtype) for v in (mean, var, std))
        batch_std = (xs_var * xs_count / (xs_count - 1)) ** 0.5 if xs_count > 1 else 0.0
        return torch.tensor(xs_mean, dtype=dtype), torch.tensor(batch_std, dtype=dtype)

    def state_dict(self) -> dict[str, float]:
        mean, var = self._moments
        return {"mean": mean, "var": var, "std": float(self.std), "count": self.count}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        mean, var, std, self.count = (float(state[k]) for k in ("mean", "var", "std", "count"))
        self._moments = (mean, var)
        self.mean, self.var, self.std = (torch.tensor(v, dtype=torch.float64) for v in (mean, var, std))


def logprobs_of_labels(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] per position: (B, T, V), (B, T) -> (B, T)."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return torch.gather(logprobs, -1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)


def tensor_stats(xs: torch.Tensor, mask: torch.Tensor, n: torch.Tensor | float) -> dict[str, float]:
    """mean, min, max and std of the masked entries (for logging)."""
    m = mask.bool()
    if not m.any():
        return {"mean": 0.0, "min": 0.0, "max": 0.0, "std": 0.0}
    mean = (xs * m).sum() / n
    return {
        "mean": float(mean),
        "min": float(xs[m].min()),
        "max": float(xs[m].max()),
        "std": float(torch.sqrt((((xs - mean) * m) ** 2).sum() / n)),
    }


def flatten_dict(d: Mapping[str, Any], parent: str = "", sep: str = "/") -> dict[str, Any]:
    """{"losses": {"loss": 1}} -> {"losses/loss": 1}; tensors become floats."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{parent}{sep}{key}" if parent else str(key)
        if isinstance(value, Mapping):
            out.update(flatten_dict(value, name, sep))
        else:
            out[name] = float(value) if isinstance(value, torch.Tensor) else value
    return out
