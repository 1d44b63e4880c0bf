"""The search proposer: enumerate family orders, rank them all with the simulator, refine around the best.

It never proposes a permutation already seen; its texts are built from predicted figures and sharing statistics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from swizzlelab.errors import UserError
from swizzlelab.optimize.state import JSONL
from swizzlelab.fmt import fmt_bytes, pct
from swizzlelab.optimize.reasons import why_new_is_better
from swizzlelab.optimize.records import Attempt, Prediction, Proposal, Wave
from swizzlelab.swizzle import parse_order
from swizzlelab.swizzle.families import FAMILIES

# A 1-D order the families do not cover: the launch order reversed.
REVERSE_1D = "pid = tl.num_programs(0) - 1 - tl.program_id(0)\n"


@dataclass(frozen=True)
class Candidate:
    """One enumerated order: a family spec (or raw formula text for orders without a family)."""

    family: str
    params: tuple[tuple[str, int], ...] = ()
    xcd: int = 0  # NUM_XCDS of an XCD-chunking step composed before the family (0: none)
    text: str = ""  # raw formula text for non-family orders
    # A nested order (family NEST, params BLOCK_M/BLOCK_N): `outer` walks the blocks, `inner` the tiles of one.
    outer: str = ""
    inner: str = ""

    @property
    def spec(self) -> str:
        if self.text:
            return self.family
        if self.family == NEST:
            size = dict(self.params)
            body = f"{self.outer}>{self.inner}@{size['BLOCK_M']}x{size['BLOCK_N']}"
        else:
            body = self.family + (":" + ",".join(f"{k}={v}" for k, v in self.params) if self.params else "")
        return f"xcd:NUM_XCDS={self.xcd}+{body}" if self.xcd else body

    def formula_text(self, rank: int) -> str:
        if self.text:
            return self.text
        return parse_order(self.spec, rank).normalized_source()

    def group(self) -> str:
        """The family group used for exploration: family plus whether XCD chunking is composed."""
        return ("xcd+" if self.xcd else "") + (f"{self.outer}>{self.inner}" if self.family == NEST else self.family)

    def describe(self) -> str:
        if self.text:
            return f"{self.family}: {self.text.strip()}"
        if self.family == NEST:
            size = dict(self.params)
            text = (f"blocks of {size['BLOCK_M']} x {size['BLOCK_N']} tiles walked by {self.outer}, the tiles of a "
                    f"block by {self.inner}")
            return text + (f", after XCD chunking with NUM_XCDS={self.xcd}" if self.xcd else "")
        doc = FAMILIES[self.family].doc if self.family in FAMILIES else self.family
        params = ", ".join(f"{k}={v}" for k, v in self.params)
        text = f"family {self.family} ({doc})" + (f" with {params}" if params else "")
        if self.xcd:
            text += (
                f", after XCD chunking with NUM_XCDS={self.xcd} ({FAMILIES['xcd'].doc}): the logical order is "
                "cut into contiguous runs, one per domain, so neighbours in the order share a domain's L2"
            )
        return text


NEST = "nest"
# Orders of the blocks (outer) and of the tiles inside a block (inner) that nested candidates combine; the
# search swaps each for the others of its list around a good nest.
NEST_OUTERS = ("serpentine", "identity", "hilbert:SIDE=8", "grouped:GROUP_M=2")
NEST_INNERS = ("column_major", "grouped:GROUP_M=4", "identity", "hilbert:SIDE=8")


def wave_blocks(resident: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """Block shapes (rows x columns of tiles) sized to the programs resident at once: a block of about
    `resident`, `resident / 2` or `resident / 4` tiles, near-square (a wave of r x c tiles reads r + c
    panels, least when r ~ c), plus bands as tall as a near-square quarter wave. Shapes that do not fit the
    grid are dropped."""
    out: list[tuple[int, int]] = []
    for share in (1, 2, 4):
        area = max(resident // share, 1)
        side = max(int(round(area ** 0.5)), 1)
        for bm, bn in ((side, max(area // side, 1)), (max(side // 2, 1), max(2 * area // side, 1)),
                       (2 * side, max(area // (2 * side), 1))):
            if bm <= rows and bn <= cols and (bm, bn) not in out and bm * bn > 1:
                out.append((bm, bn))
    return out


def nest_candidates(grid: tuple[int, ...], resident: int) -> list[Candidate]:
    """Wave-aware nested orders: blocks sized to the resident programs (wave_blocks) walked serpentine (the
    next block starts next to where the last ended, so what the last wave read is still in L2) or along a
    Hilbert curve, tiles inside a block column by column (consecutive programs share a column panel)."""
    if len(grid) != 2 or resident < 2:
        return []
    rows, cols = grid
    out = []
    for bm, bn in wave_blocks(resident, rows, cols):
        for outer, inner in (("serpentine", "column_major"), ("hilbert:SIDE=8", "column_major"),
                             ("serpentine", "grouped:GROUP_M=4")):
            out.append(Candidate(NEST, (("BLOCK_M", bm), ("BLOCK_N", bn)), outer=outer, inner=inner))
    return out


def _powers_of_two(low: int, high: int) -> list[int]:
    out, value = [], low
    while value <= high:
        out.append(value)
        value *= 2
    return out


def period_candidates(periods: tuple[int, ...], n_domains: int) -> list[Candidate]:
    """Orders the trace asks for: residue classes mod each sharing period run together (also behind XCD
    chunking on multi-domain GPUs, so one class stays on one domain)."""
    out = []
    for period in dict.fromkeys(periods):
        out.append(Candidate("stride", (("STRIDE", period),)))
        if n_domains > 1:
            out.append(Candidate("stride", (("STRIDE", period),), n_domains))
    return out


def coarse_candidates(grid: tuple[int, ...], n_domains: int, periods: tuple[int, ...] = (),
                      resident: int = 0) -> list[Candidate]:
    """The first sweep: every family with parameters on a coarse ladder, most plausible first; on 1-D grids
    the stride orders of the trace's sharing periods come right after the launch order. `resident` (programs
    resident at once per L2 domain; 0: unknown) adds nested orders whose blocks are sized to it."""
    if len(grid) == 1:
        n = grid[0]
        out = [Candidate("identity1d"), Candidate("reverse", text=REVERSE_1D)]
        out += period_candidates(periods, n_domains)
        ladder = _powers_of_two(2, max(n // 2, 1))
        chunks = sorted(set(ladder + ([n_domains] if 1 < n_domains < n else [])))
        if 1 < n_domains < n:
            chunks.remove(n_domains)
            out.append(Candidate("xcd", (("NUM_XCDS", n_domains),)))
        for index in range(max(len(chunks), len(ladder))):
            out += [Candidate("xcd", (("NUM_XCDS", chunks[index]),))] if index < len(chunks) else []
            out += [Candidate("stride", (("STRIDE", ladder[index]),))] if index < len(ladder) else []
        return out
    rows, cols = grid
    small = min(rows, cols)
    base: list[Candidate] = [Candidate("identity")]
    group_sizes = sorted({g for g in _powers_of_two(2, min(64, rows))} | {g for g in (3, 6, 12, 24, 48) if g <= rows})
    base += [Candidate("grouped", (("GROUP_M", g),)) for g in group_sizes]
    base += [Candidate("column_major"), Candidate("diagonal"), Candidate("serpentine")]
    for name in ("hilbert", "morton"):
        base += [Candidate(name, (("SIDE", s),)) for s in _powers_of_two(2, min(32, small))]
    for tm in _powers_of_two(2, min(16, rows)):
        for tn in _powers_of_two(2, min(16, cols)):
            base.append(Candidate("tiles", (("TILE_M", tm), ("TILE_N", tn))))
    # Wave-aware orders: bands that turn around at their ends, and wave-sized blocks (a wave is a few hundred
    # programs on today's GPUs: 8-16 rows by 8-32 columns); neighbours() tunes their parameters.
    base += [Candidate("grouped_serpentine", (("GROUP_M", g),)) for g in (4, 8, 12, 16, 24, 32) if g <= rows]
    base += [Candidate("wave", (("GROUP_M", gm), ("BLOCK_N", bn)))
             for gm, bn in ((16, 16), (8, 32), (16, 8), (12, 24), (24, 12), (32, 8)) if gm <= rows and bn <= cols]
    base = _plausible_first(base)
    # After the plain families: cheap to skip when the screening time runs out before them.
    base += [c for c in nest_candidates(grid, resident) if c not in base]
    if n_domains > 1:
        # On multi-domain GPUs every 2-D order is also tried behind XCD chunking, interleaved so the most
        # plausible of both kinds are screened first when the screening time runs out.
        out = []
        for cand in base:
            out += [Candidate(cand.family, cand.params, n_domains, outer=cand.outer, inner=cand.inner), cand]
        return out
    return base


# Screening order when time is short: each family at its usual parameter first, then the rest of the ladders.
FIRST_PICKS = ("identity", "grouped:GROUP_M=8", "tiles:TILE_M=4,TILE_N=4", "hilbert:SIDE=8", "grouped:GROUP_M=16",
               "grouped:GROUP_M=12", "grouped_serpentine:GROUP_M=16", "grouped:GROUP_M=4", "morton:SIDE=8",
               "column_major", "diagonal", "serpentine")


def _plausible_first(cands: list[Candidate]) -> list[Candidate]:
    rank = {spec: i for i, spec in enumerate(FIRST_PICKS)}
    return sorted(cands, key=lambda c: rank.get(c.spec, len(rank)))


def neighbours(cand: Candidate, grid: tuple[int, ...], n_domains: int) -> list[Candidate]:
    """Local refinements: parameters one step away (+-1, x2, /2) and the XCD step toggled."""
    out: list[Candidate] = []
    if cand.text:
        return out
    limits = {"GROUP_M": grid[0] if len(grid) == 2 else 1, "TILE_M": grid[0], "TILE_N": grid[-1], "BLOCK_N": grid[-1],
              "BLOCK_M": grid[0], "SIDE": min(grid) if len(grid) == 2 else 1, "NUM_XCDS": grid[0] // 2,
              "STRIDE": grid[0] // 2}
    for index, (name, value) in enumerate(cand.params):
        steps = {value - 1, value + 1, value * 2, value // 2, value - 2, value + 2}
        if name == "SIDE":
            steps = {value * 2, value // 2}
        for new in sorted(steps):
            if new < (2 if name in ("SIDE", "NUM_XCDS", "STRIDE") else 1) or new > max(limits.get(name, new), 1) or new == value:
                continue
            params = list(cand.params)
            params[index] = (name, new)
            out.append(Candidate(cand.family, tuple(params), cand.xcd, outer=cand.outer, inner=cand.inner))
    if cand.family == NEST:
        # Composition tuned too: the other block walks and the other in-block orders at the same block size.
        out += [Candidate(NEST, cand.params, cand.xcd, outer=o, inner=cand.inner) for o in NEST_OUTERS if o != cand.outer]
        out += [Candidate(NEST, cand.params, cand.xcd, outer=cand.outer, inner=i) for i in NEST_INNERS if i != cand.inner]
    if n_domains > 1 and len(grid) == 2:
        out.append(Candidate(cand.family, cand.params, 0 if cand.xcd else n_domains, outer=cand.outer,
                             inner=cand.inner))
    return out


@dataclass
class Screened:
    """A candidate after the simulator saw it (or after it failed to parse/prove)."""

    candidate: Candidate
    text: str
    permutation_id: str | None
    prediction: Prediction | None
    wave: Wave | None = None
    problem: str = ""


def score(prediction: Prediction) -> tuple[float, ...]:
    """Lower is better: predicted DRAM bytes (read + write), then a higher hit rate."""
    return prediction.score()


@dataclass
class SearchProposer:
    """Ranks candidates with `screen(text) -> (permutation_id, prediction, wave, problem)` and proposes the best
    untried ones, alternating exploitation (best overall) with exploration (best of an untried family group)."""

    grid: tuple[int, ...]
    n_domains: int
    screen: Callable[[str], tuple[str | None, Prediction | None, Wave | None, str]]
    vendor: str = "nvidia"
    screen_budget_s: float = 90.0
    notes: Callable[[str], None] = lambda text: None
    # Exploration only pays when orders are measured (a prediction can be wrong); then every other iteration
    # tries the best order of an untried family group whose predicted DRAM bytes are within `explore_margin`.
    explore: bool = False
    explore_margin: float = 0.10
    context: Callable[[], str] = lambda: ""
    # Sharing periods of a 1-D trace (see sim.index_periods); called once, when the first sweep is built.
    periods: Callable[[], tuple[int, ...]] = lambda: ()
    # Programs resident at once per L2 domain (units x occupancy; 0: unknown): sizes the nested wave orders.
    resident: int = 0
    # Candidates screened at once on threads (the simulator releases the GIL); rankings do not depend on it.
    workers: int = 1
    # Called once per candidate the screen rejected (spec, formula text, reason), so every rejection is logged.
    rejected: Callable[[str, str, str], None] = lambda spec, text, reason: None
    # Follows the screening: (candidates screened, candidates in this sweep).
    on_screen: Callable[[int, int], None] = lambda done, total: None
    screened: dict[str, Screened] = field(default_factory=dict)
    _coarse_done: bool = False
    _coarse_distinct: int = 0
    # RunState.best over a list of attempts (a prefix of the history, when a resumed run replays its refinements).
    best_of: Callable[[list[Attempt]], Attempt] = lambda attempts: attempts[0]
    _spent_s: float = 0.0
    _replayed: bool = False
    # The ranking: lower is better (default: predicted DRAM bytes). The loop gives it the time model's predicted
    # speedup once a GPU measured the kernel's own order.
    rank_key: Callable[[Prediction], tuple[float, ...]] = score
    # Family groups never proposed again (they measured slower in this run).
    excluded: Callable[[str], bool] = lambda group: False
    # Given the untried orders, best first: a one-line reason to stop proposing (nothing to gain), or None.
    stop_rule: Callable[[list[Screened]], str | None] = lambda ranked: None
    stop_reason: str = ""
    # Seconds of screening before each proposal while the first sweep is unfinished (0: the whole sweep before
    # the first proposal). Where a GPU measures, the first candidate is measured after this slice and the sweep
    # goes on between measurements, each measurement teaching the ranking of the rest.
    slice_s: float = 0.0
    _pending: list[Candidate] = field(default_factory=list)
    _slices_noted: bool = False

    def _texts(self, batch: list[Candidate]) -> list[tuple[Candidate, str, str]]:
        """(candidate, formula text, problem) for each; built on the calling thread (parsing is not
        thread-safe on CPython 3.11)."""
        out = []
        for cand in batch:
            try:
                out.append((cand, cand.formula_text(len(self.grid)), ""))
            except Exception as err:  # noqa: BLE001 - a family that cannot express this grid: recorded, not fatal
                out.append((cand, "", str(err)))
        return out

    def _evaluate(self, item: tuple[Candidate, str, str]) -> Screened:
        cand, text, problem = item
        if problem:
            return Screened(cand, "", None, None, problem=problem)
        perm_id, prediction, wave, problem = self.screen(text)
        return Screened(cand, text, perm_id, prediction, wave, problem)

    def screen_all(self, cands: list[Candidate], slice_s: float = 0.0) -> int:
        """Screen the candidates not seen yet, up to `workers` at once, until the screening time is spent (or,
        with `slice_s`, this call's slice of it: the rest stay unscreened for a later call).

        The budget is checked before each candidate starts (not per batch): once it is spent nothing new
        starts, so screening ends at most one candidate's time after the budget."""
        started = time.perf_counter()
        todo = list({c.spec: c for c in cands if c.spec not in self.screened}.values())
        # Every text is built here, before any worker starts: CPython 3.11's parser is not thread-safe, and the
        # workers parse too (under the screen function's lock, which this thread does not hold).
        items = self._texts(todo)
        width = max(self.workers, 1)
        results: dict[int, Screened] = {}
        running: dict[Future, int] = {}
        next_index = 0
        out_of_time = False
        with ThreadPoolExecutor(max_workers=width) as pool:
            while next_index < len(todo) or running:
                while not out_of_time and next_index < len(todo) and len(running) < width:
                    if self._spent_s + (time.perf_counter() - started) > self.screen_budget_s:
                        out_of_time = True
                        break
                    if slice_s and time.perf_counter() - started > slice_s:
                        break
                    running[pool.submit(self._evaluate, items[next_index])] = next_index
                    next_index += 1
                if not running:
                    break
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    results[running.pop(future)] = future.result()
                self.on_screen(len(results), len(todo))
        # Stored in candidate order whatever finished first, so ties rank as in a serial sweep.
        for index in sorted(results):
            item = results[index]
            self.screened[todo[index].spec] = item
            if item.prediction is None:
                self.rejected(todo[index].spec, item.text, item.problem or "no prediction")
        if out_of_time:
            self.notes(
                f"search: screening time ({self.screen_budget_s:.0f} s) spent after {len(self.screened)} "
                "candidates; raise --screen-s to rank more"
            )
            self._pending = []
        self._spent_s += time.perf_counter() - started
        return len(results)

    def _sweep(self, cands: list[Candidate]) -> None:
        """Screen the first sweep, all of it or the next slice of what is left of it."""
        self.screen_all(cands, self.slice_s)
        self._pending = [c for c in cands if c.spec not in self.screened] if self._spent_s < self.screen_budget_s else []

    def _ranked(self, seen: set[str]) -> list[Screened]:
        by_id: dict[str, Screened] = {}
        for item in self.screened.values():
            if item.prediction is None or item.permutation_id is None or item.permutation_id in seen:
                continue
            if item.permutation_id not in by_id:  # first spec of an id wins: dedupe before ranking
                by_id[item.permutation_id] = item
        kept = [s for s in by_id.values() if not self.excluded(s.candidate.group())]
        return sorted(kept, key=lambda s: self.rank_key(s.prediction))

    def ranked(self, seen: set[str]) -> list[Screened]:
        """The screened orders not in `seen`, one per permutation, best-ranked first."""
        return self._ranked(seen)

    def rejection_counts(self) -> list[tuple[str, int]]:
        """(reason, how many candidates it rejected), most common first."""
        counts: dict[str, int] = {}
        for item in self.screened.values():
            if item.prediction is None:
                reason = item.problem or "no prediction"
                counts[reason] = counts.get(reason, 0) + 1
        return sorted(counts.items(), key=lambda kv: -kv[1])

    def rejection_summary(self) -> str:
        """One line: how many candidates were rejected, and why (the three commonest reasons)."""
        counts = self.rejection_counts()
        if not counts:
            return ""
        total = sum(n for _, n in counts)
        parts = "; ".join(f"{n} x {reason}" for reason, n in counts[:3])
        more = f"; {len(counts) - 3} other reason(s)" if len(counts) > 3 else ""
        return f"search: {total} candidate(s) rejected before ranking: {parts}{more} (each in {JSONL})"

    def n_distinct(self) -> int:
        return len({s.permutation_id for s in self.screened.values() if s.prediction is not None})

    def best_untried(self, history: list[Attempt], n: int = 1) -> list[tuple[str, str]]:
        """(formula text, family spec) of the `n` best-ranked orders not tried yet: what a run stopped by the time
        model would have proposed next."""
        seen = {a.permutation_id for a in history if a.permutation_id}
        return [(s.text, s.candidate.spec) for s in self._ranked(seen)[:n]]

    def start(self, want: int = 0, until: float | None = None) -> None:
        """Build and screen the first sweep, once: its first slice (all of it without slices), then more slices
        while fewer than `want` distinct orders are ranked and the clock (time.perf_counter) is before `until`.
        Notes what was ranked; raises when no candidate could be ranked at all."""
        if self._coarse_done:
            return
        cands = coarse_candidates(self.grid, self.n_domains, self.periods() if len(self.grid) == 1 else (),
                                  resident=self.resident)
        self._sweep(cands)
        while self._pending and self.n_distinct() < want and (until is None or time.perf_counter() < until):
            self._sweep(self._pending)
        self._coarse_done = True
        self._coarse_distinct = self.n_distinct()
        rest = (f"; {len(self._pending)} more are ranked between measurements ({self.slice_s:.0f} s before each)"
                if self._pending else "")
        self.notes(
            f"search: first sweep ranked {self._coarse_distinct} distinct orders ({len(self.screened)} "
            f"candidates) with the simulator in {self._spent_s:.1f} s{rest}"
        )
        summary = self.rejection_summary()
        if summary:
            self.notes(summary)
        if self.screened and self.n_distinct() == 0:
            reason, count = self.rejection_counts()[0]
            raise UserError(
                f"search: 0 of {len(self.screened)} candidate orders could be ranked; the most common reason "
                f"({count} of {len(self.screened)}): {reason}"
            )

    def picks(self, seen: set[str], n: int, spread: bool = True) -> list[Screened]:
        """Up to `n` untried distinct orders to measure together, in the ranking's order of visits: with `spread`,
        the best-ranked order of each family group first (the model ranks within what it can see; measuring
        decides between families), then the best-ranked of the rest."""
        ranked = self._ranked(seen)
        if not spread:
            return ranked[:n]
        first, groups = [], set()
        for item in ranked:
            if item.candidate.group() not in groups:
                groups.add(item.candidate.group())
                first.append(item)
        chosen = {id(item) for item in first[:n]}
        rest = [item for item in ranked if id(item) not in chosen]
        picked = first[:n] + rest[:max(n - len(first), 0)]
        order = {id(item): rank for rank, item in enumerate(ranked)}
        return sorted(picked, key=lambda item: order[id(item)])

    def refinements(self, specs: list[str], seen: set[str], n: int, seconds: float) -> list[Screened]:
        """The untried neighbours (search.neighbours) of the orders named by `specs`, screened for up to `seconds`
        more (beyond the screening budget: a measured family earns them) and ranked; up to `n`, spread over the
        anchors in turn so each measured family gets its neighbours tried."""
        anchors = [self.screened[spec].candidate for spec in specs if spec in self.screened]
        per_anchor = [neighbours(a, self.grid, self.n_domains) for a in anchors]
        self.screen_budget_s = max(self.screen_budget_s, self._spent_s + seconds)
        self.screen_all([c for group in per_anchor for c in group])
        ranked_ids = {id(item): rank for rank, item in enumerate(self._ranked(seen))}
        lists = [sorted((self.screened[c.spec] for c in group if c.spec in self.screened
                         and id(self.screened[c.spec]) in ranked_ids), key=lambda item: ranked_ids[id(item)])
                 for group in per_anchor]
        out: list[Screened] = []
        taken: set[str] = set()
        while len(out) < n and any(lists):
            for items in lists:
                while items and items[0].permutation_id in taken:
                    items.pop(0)
                if items and len(out) < n:
                    item = items.pop(0)
                    taken.add(item.permutation_id or "")
                    out.append(item)
        return out

    def propose(self, history: list[Attempt], best: Attempt) -> Proposal | None:
        """The next candidate, or None when every enumerated order has been tried."""
        seen = {a.permutation_id for a in history if a.permutation_id}
        self.start()
        if not self._replayed:
            # A resumed run first refines as the interrupted one did before each of its search proposals, so it
            # proposes what that run would have proposed next.
            self._replayed = True
            for i, attempt in enumerate(history):
                if attempt.proposer == "search" and i > 0:
                    self._refine({a.permutation_id for a in history[:i] if a.permutation_id},
                                 self.best_of(history[:i]))
        elif self._pending:
            self._sweep(self._pending)
        # While the first sweep is unfinished, a slice is screened before each proposal; more slices as long as
        # nothing ranked so far is predicted to gain (measuring such an order would spend minutes on noise).
        while self._pending:
            so_far = self._ranked(seen)
            if so_far and self.stop_rule(so_far) is None:
                break
            self._sweep(self._pending)
        if not self._slices_noted and not self._pending and self.slice_s:
            self._slices_noted = True
            self.notes(f"search: first sweep done: {self.n_distinct()} distinct orders ranked in "
                       f"{self._spent_s:.1f} s of screening")
        self._refine(seen, best)
        ranked = self._ranked(seen)
        if not ranked:
            return None
        # Nothing is called hopeless while orders of the first sweep are still unranked.
        reason = self.stop_rule(ranked) if not self._pending else None
        if reason:
            self.stop_reason = reason
            return None
        # Counted from the history, not from this object's calls, so a resumed run alternates exploit and explore
        # exactly where the interrupted one would have.
        n_call = 1 + sum(1 for a in history if a.proposer == "search")
        mode = "exploit"
        pick = ranked[0]
        if self.explore and n_call % 2 == 0:
            tried_groups = {
                s.candidate.group() for s in self.screened.values() if s.permutation_id in seen
            }
            limit = score(ranked[0].prediction)[0] * (1 + self.explore_margin)
            fresh = [s for s in ranked[:max(3, len(ranked) // 4)]
                     if s.candidate.group() not in tried_groups and score(s.prediction)[0] <= limit]
            if fresh:
                pick, mode = fresh[0], "explore"
        return self.proposal(pick, mode, ranked, best)

    def _refine(self, seen: set[str], best: Attempt) -> None:
        """Screen the neighbours of the best attempt so far and of the two best screened candidates not yet tried."""
        ranked = self._ranked(seen)
        anchors = [s.candidate for s in ranked[:2]]
        best_spec = next((s for s in self.screened.values() if s.permutation_id == best.permutation_id), None)
        if best_spec is not None:
            anchors.insert(0, best_spec.candidate)
        self.screen_all([n for a in anchors for n in neighbours(a, self.grid, self.n_domains)])

    def proposal(self, pick: Screened, mode: str, ranked: list[Screened], best: Attempt) -> Proposal:
        pred = pick.prediction
        assert pred is not None
        position = ranked.index(pick) + 1
        why = {
            "exploit": "exploit: the best-predicted order not yet tried",
            "explore": f"explore: the best order of family group {pick.candidate.group()}, not tried yet "
                       f"(rank {position} of {len(ranked)} untried)",
            "sweep": f"measure broadly: the best-ranked order of its family group or the next best (rank {position} "
                     f"of {len(ranked)} untried), timed with the others against the kernel's own",
            "refine": f"refine: a neighbour of an order that measured well (rank {position} of {len(ranked)} "
                      "untried)",
        }[mode]
        top = ", ".join(
            f"{s.candidate.spec} {pct(s.prediction.l2_hit_rate)} / {fmt_bytes(s.prediction.dram_read_bytes)}"
            for s in ranked[:3]
        )
        refined = self.n_distinct() - self._coarse_distinct
        context = self.context().strip()
        reasoning = (
            (context + "\n" if context else "")
            + f"The search's first sweep ranked {self._coarse_distinct} distinct orders with the simulator (model "
            f"{pred.model}; duplicates by permutation id removed)"
            + (f", and {refined} more near the leaders since" if refined > 0 else "")
            + f". Untried leaders (hit rate / DRAM read): {top}. Chosen by {why}."
        )
        hypothesis = (
            f"{pick.candidate.spec}: predicted hit {pct(pred.l2_hit_rate)}, DRAM read "
            f"{fmt_bytes(pred.dram_read_bytes)} (model {pred.model}) vs {best.name()} "
            f"{pct(best.prediction.l2_hit_rate) if best.prediction else 'n/a'}"
        )
        return Proposal(
            formula_text=pick.text,
            hypothesis=hypothesis,
            proposer="search",
            label=pick.candidate.spec,
            reasoning=reasoning,
            summary=f"Replace the launch order by {pick.candidate.describe()}.",
            why_better=why_new_is_better(pred, pick.wave, best, self.vendor),
        )
