"""Every Nsight Compute metric swizzlelab asks for exists on the H100 (gh100), checked offline.

The list in docs/ncu was read with `ncu --query-metrics --chip gh100` on the lent H100.
"""

import gzip
import re
from pathlib import Path

from swizzlelab.harness import ncu

METRIC_LIST = Path(__file__).resolve().parents[1] / "docs" / "ncu" / "metrics_gh100_h100.txt.gz"


def _known_base_names() -> set[str]:
    with gzip.open(METRIC_LIST, "rt") as handle:
        return set(handle.read().split())


METRIC_NAME = re.compile(r"^[a-z0-9]+__[a-z0-9_]+(\.[a-z0-9_]+)*$")


def _requested_metrics() -> list[str]:
    """Every metric-shaped string in swizzlelab.harness.ncu's module-level constants (tuples included)."""
    found: list[str] = []

    def collect(value: object) -> None:
        if isinstance(value, str) and METRIC_NAME.match(value):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)

    for name, value in vars(ncu).items():
        if not name.startswith("__"):
            collect(value)
    return found


def test_every_requested_metric_exists_on_gh100():
    known = _known_base_names()
    requested = _requested_metrics()
    assert len(requested) >= 13, requested
    unknown = [m for m in requested if m.split(".")[0] not in known]
    assert not unknown, f"metrics ncu on the H100 does not know: {unknown}"


def test_the_list_rejects_a_typo():
    assert "lts__t_sector_hitrate" not in _known_base_names()
    assert "lts__t_sector_hit_rate" in _known_base_names()
