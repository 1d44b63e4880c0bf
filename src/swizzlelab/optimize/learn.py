"""What a run learns from its own measurements: a correction of the time model's predicted speedups fitted on the
orders measured so far, and the order families that measured slower (never proposed again in another spelling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Prior on the correction's exponent a in log(measured) = a * log(predicted): centred on the model (a = 1), with
# this spread; each measurement pulls it by its own weight (bayesian linear regression through the origin).
PRIOR_SD = 0.5


@dataclass
class Correction:
    """log(measured speedup) ~ a * log(predicted speedup), a's posterior mean from the run's measured orders."""

    sigma: float  # the time model's own spread (log) on held-out rows
    pairs: list[tuple[float, float, float]] = field(default_factory=list)  # (log predicted, log measured, var)
    slower_groups: dict[str, float] = field(default_factory=dict)  # family group -> measured speedup

    def observe(self, predicted: float, measured: float, ci95: tuple[float, float], group: str) -> None:
        low, high = ci95
        se = (math.log(high) - math.log(low)) / (2 * 1.96) if low > 0 and high > low else self.sigma
        self.pairs.append((math.log(predicted), math.log(measured), se ** 2 + self.sigma ** 2))
        if high < 1.0:  # a regression outside noise: that family is not proposed again
            self.slower_groups[group] = min(measured, self.slower_groups.get(group, measured))

    @property
    def exponent(self) -> float:
        precision = 1.0 / PRIOR_SD ** 2
        weighted = precision * 1.0
        for x, y, var in self.pairs:
            precision += x * x / var
            weighted += x * y / var
        return weighted / precision

    def adjust(self, predicted: float) -> float | None:
        """The corrected speedup, or None before any measurement."""
        if not self.pairs:
            return None
        return math.exp(self.exponent * math.log(predicted))

    def excluded(self, group: str) -> bool:
        return group in self.slower_groups

    def describe(self) -> str:
        if not self.pairs:
            return "no measurement yet: the time model's predictions stand"
        slow = ", ".join(f"{g} ({s:.3f}x)" for g, s in self.slower_groups.items())
        return (f"after {len(self.pairs)} measured order(s) the run scales predicted log-speedups by "
                f"{self.exponent:.2f}" + (f"; families measured slower, not proposed again: {slow}" if slow else ""))
