"""The family library: named, parameterised block orders, each written in the formula language itself.

Every family reads `pid` (the launch index) and, on 2-D tile grids, `num_pid_m`/`num_pid_n`; linear families
yield a new `pid`, 2-D families yield `pid_m`, `pid_n`. `compose` chains a linear family before another.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swizzlelab.errors import FormulaError, UserError
from swizzlelab.swizzle.lang import Formula, parse_formula, read_formula_file, rename

HEADER = "pid = tl.program_id(0)\n"
INTERFACE_NAMES = frozenset({"pid", "pid_m", "pid_n", "num_pid_m", "num_pid_n"})
# What a linear (pid -> pid) order passes on when composed: its pid_m/pid_n, if any, are its own temporaries.
LINEAR_INTERFACE_NAMES = frozenset({"pid", "num_pid_m", "num_pid_n"})


@dataclass(frozen=True)
class Param:
    """A typed family parameter with its default and the rule it must satisfy."""

    name: str
    default: int
    doc: str
    minimum: int = 1
    power_of_two: bool = False

    def validate(self, family_name: str, value: object) -> int:
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise UserError(f"family {family_name}: {self.name}={value!r} is not an integer") from None
        if number < self.minimum:
            raise UserError(f"family {family_name}: {self.name}={number} must be >= {self.minimum}")
        if self.power_of_two and number & (number - 1):
            raise UserError(f"family {family_name}: {self.name}={number} must be a power of two")
        return number


@dataclass(frozen=True)
class Family:
    """A named order: `kind` is 'linear' (pid -> pid) or '2d' (pid -> pid_m, pid_n)."""

    name: str
    kind: str
    doc: str
    params: tuple[Param, ...]
    body: Callable[..., str]


def _identity_2d() -> str:
    return "pid_m = pid // num_pid_n\npid_n = pid % num_pid_n\n"


def _identity_linear() -> str:
    return "pid = pid\n"


def _column_major() -> str:
    return "pid_m = pid % num_pid_m\npid_n = pid // num_pid_m\n"


def _group_rows(GROUP_M: int) -> str:
    """The band of GROUP_M tile rows program `pid` falls in, and its row pid_m there (grouped and its variants)."""
    return (
        f"GROUP_M = {GROUP_M}\n"
        "num_pid_in_group = GROUP_M * num_pid_n\n"
        "group_id = pid // num_pid_in_group\n"
        "first_pid_m = group_id * GROUP_M\n"
        "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)\n"
        "pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)\n"
    )


def _grouped(GROUP_M: int) -> str:
    return _group_rows(GROUP_M) + "pid_n = (pid % num_pid_in_group) // group_size_m\n"


def _xcd(NUM_XCDS: int) -> str:
    # The hardware sends launch index i to XCD i % NUM_XCDS; give each XCD a contiguous run of logical ids.
    # XCDs below `extra` get one more program when the count is not a multiple of NUM_XCDS.
    return (
        f"NUM_XCDS = {NUM_XCDS}\n"
        "num_pid = tl.num_programs(0)\n"
        "per_xcd = num_pid // NUM_XCDS\n"
        "extra = num_pid % NUM_XCDS\n"
        "xcd = pid % NUM_XCDS\n"
        "local_id = pid // NUM_XCDS\n"
        "pid = xcd * per_xcd + tl.minimum(xcd, extra) + local_id\n"
    )


def _stride(STRIDE: int) -> str:
    # Residue classes mod STRIDE run one after another (class r: r, r + STRIDE, ...), so programs whose data
    # repeats with period STRIDE (e.g. rows of a graph numbered round-robin over clusters) run together.
    # Classes below `extra` hold one program more when the count is not a multiple of STRIDE.
    return (
        f"STRIDE = {STRIDE}\n"
        "num_pid = tl.num_programs(0)\n"
        "base = num_pid // STRIDE\n"
        "extra = num_pid % STRIDE\n"
        "long_count = extra * (base + 1)\n"
        "in_long = pid < long_count\n"
        "short_pos = pid - long_count\n"
        "residue = tl.where(in_long, pid // (base + 1), extra + short_pos // tl.maximum(base, 1))\n"
        "index = tl.where(in_long, pid % (base + 1), short_pos % tl.maximum(base, 1))\n"
        "pid = residue + index * STRIDE\n"
    )


def _blocked_curve(side: int, decode: str) -> str:
    """SIDE x SIDE blocks ordered row-major, each walked by `decode` (within -> dm, dn); leftover strips
    on the right and at the bottom run row-major, so any grid size is covered exactly once."""
    return (
        f"SIDE = {side}\n"
        "full_m = num_pid_m // SIDE\n"
        "full_n = num_pid_n // SIDE\n"
        "n_full = full_m * full_n * SIDE * SIDE\n"
        "block = pid // (SIDE * SIDE)\n"
        "within = pid % (SIDE * SIDE)\n"
        + decode
        + "block_m = block // tl.maximum(full_n, 1)\n"
        "block_n = block % tl.maximum(full_n, 1)\n"
        "rest = pid - n_full\n"
        "right_w = num_pid_n - full_n * SIDE\n"
        "right_count = full_m * SIDE * right_w\n"
        "right_m = rest // tl.maximum(right_w, 1)\n"
        "right_n = full_n * SIDE + rest % tl.maximum(right_w, 1)\n"
        "bottom = rest - right_count\n"
        "bottom_m = full_m * SIDE + bottom // num_pid_n\n"
        "bottom_n = bottom % num_pid_n\n"
        "in_full = pid < n_full\n"
        "in_right = rest < right_count\n"
        "pid_m = tl.where(in_full, block_m * SIDE + dm, tl.where(in_right, right_m, bottom_m))\n"
        "pid_n = tl.where(in_full, block_n * SIDE + dn, tl.where(in_right, right_n, bottom_n))\n"
    )


def _log2(value: int) -> int:
    return value.bit_length() - 1


def _morton(SIDE: int) -> str:
    bits = _log2(SIDE)
    dn = " | ".join(f"(((within >> {2 * b}) & 1) << {b})" for b in range(bits)) or "0"
    dm = " | ".join(f"(((within >> {2 * b + 1}) & 1) << {b})" for b in range(bits)) or "0"
    return _blocked_curve(SIDE, f"dm = {dm}\ndn = {dn}\n")


def _hilbert(SIDE: int) -> str:
    # The classic distance -> (x, y) walk, unrolled one level per bit because formulas have no loops.
    lines = ["hx = 0", "hy = 0", "ht = within"]
    level = 1
    while level < SIDE:
        lines += [
            "rx = (ht // 2) & 1",
            "ry = (ht ^ rx) & 1",
            f"fx = tl.where(rx == 1, {level - 1} - hx, hx)",
            f"fy = tl.where(rx == 1, {level - 1} - hy, hy)",
            "sx = tl.where(ry == 0, fy, hx)",
            "sy = tl.where(ry == 0, fx, hy)",
            f"hx = sx + {level} * rx",
            f"hy = sy + {level} * ry",
            "ht = ht // 4",
        ]
        level *= 2
    lines += ["dm = hy", "dn = hx"]
    return _blocked_curve(SIDE, "\n".join(lines) + "\n")


def _diagonal() -> str:
    # Consecutive programs take different rows and columns: program q*M + r runs tile (r, (q + r) mod N),
    # a bijection because q -> (q + r) mod N is one for every r.
    return "pid_m = pid % num_pid_m\npid_n = (pid // num_pid_m + pid_m) % num_pid_n\n"


def _serpentine() -> str:
    return (
        "row = pid // num_pid_n\n"
        "col = pid % num_pid_n\n"
        "pid_m = row\n"
        "pid_n = tl.where(row % 2 == 1, num_pid_n - 1 - col, col)\n"
    )


def _tiles(TILE_M: int, TILE_N: int) -> str:
    # Bands of TILE_M rows; inside a band, blocks of TILE_N columns; inside a block, row-major. The last band
    # and the last block may be smaller, so any grid is covered exactly once.
    return (
        f"TILE_M = {TILE_M}\n"
        f"TILE_N = {TILE_N}\n"
        "band = TILE_M * num_pid_n\n"
        "band_id = pid // band\n"
        "in_band = pid % band\n"
        "band_h = tl.minimum(TILE_M, num_pid_m - band_id * TILE_M)\n"
        "block_id = in_band // (band_h * TILE_N)\n"
        "in_block = in_band % (band_h * TILE_N)\n"
        "block_w = tl.minimum(TILE_N, num_pid_n - block_id * TILE_N)\n"
        "pid_m = band_id * TILE_M + in_block // block_w\n"
        "pid_n = block_id * TILE_N + in_block % block_w\n"
    )


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("identity", "2d", "row-major: the kernel's default order", (), _identity_2d),
        Family("identity1d", "linear", "launch order unchanged (1-D)", (), _identity_linear),
        Family("column_major", "2d", "column-major over the tile grid", (), _column_major),
        Family(
            "grouped",
            "2d",
            "GROUP_M rows at a time, column by column (Triton matmul tutorial)",
            (Param("GROUP_M", 8, "rows per group"),),
            _grouped,
        ),
        Family(
            "xcd",
            "linear",
            "contiguous chunks of logical ids per XCD under round-robin dispatch, correct tail",
            (Param("NUM_XCDS", 8, "number of XCDs (L2 domains)"),),
            _xcd,
        ),
        Family(
            "stride",
            "linear",
            "residue classes mod STRIDE one after another: r, r+STRIDE, r+2*STRIDE, ..., then r+1, ...",
            (Param("STRIDE", 2, "distance between programs that run next to each other", minimum=1),),
            _stride,
        ),
        Family(
            "morton",
            "2d",
            "Z-order inside SIDE x SIDE blocks",
            (Param("SIDE", 8, "block side (power of two)", minimum=2, power_of_two=True),),
            _morton,
        ),
        Family(
            "hilbert",
            "2d",
            "Hilbert curve inside SIDE x SIDE blocks",
            (Param("SIDE", 8, "block side (power of two)", minimum=2, power_of_two=True),),
            _hilbert,
        ),
        Family("diagonal", "2d", "wrapped anti-diagonals: neighbours differ in row and column", (), _diagonal),
        Family("serpentine", "2d", "row-major, every other row reversed", (), _serpentine),
        Family(
            "tiles",
            "2d",
            "tiles of TILE_M x TILE_N tiles, row-major inside and between",
            (Param("TILE_M", 4, "rows per super-tile"), Param("TILE_N", 4, "columns per super-tile")),
            _tiles,
        ),
    )
}
ALIASES = {"interleave": "stride", "row_major": "identity", "hilbert_curve": "hilbert", "z_order": "morton", "zorder": "morton"}


def _prefix_temporaries(formula: Formula, prefix: str, keep: frozenset[str] = INTERFACE_NAMES) -> Formula:
    mapping = {
        name: f"{prefix}{name.removeprefix('swz_')}"
        for name in formula.assigned_names
        if name not in keep
    }
    return rename(formula, mapping) if mapping else formula


def _lookup(name: str) -> Family:
    key = ALIASES.get(name, name)
    if key not in FAMILIES:
        raise UserError(f"unknown swizzle family {name!r}: known are {', '.join(sorted(FAMILIES))}")
    return FAMILIES[key]


def family_body(name: str, **params: object) -> tuple[Family, str, dict[str, int]]:
    """The family, its formula body (without the program_id header) and the validated parameters."""
    spec = _lookup(name)
    known = {p.name for p in spec.params}
    unknown = [k for k in params if k not in known]
    if unknown:
        raise UserError(
            f"family {spec.name} has no parameter {', '.join(unknown)}: "
            f"it takes {', '.join(sorted(known)) or 'no parameters'}"
        )
    values = {p.name: p.validate(spec.name, params.get(p.name, p.default)) for p in spec.params}
    return spec, spec.body(**values), values


def family(name: str, **params: object) -> Formula:
    """A complete formula for one family (its temporaries prefixed so they cannot clash with a kernel's)."""
    spec, body, _ = family_body(name, **params)
    outputs = ("pid",) if spec.kind == "linear" else ("pid_m", "pid_n")
    formula = parse_formula(HEADER + body, outputs)
    return _prefix_temporaries(formula, "swz_")


def compose(linear: Formula, outer: Formula) -> Formula:
    """`linear` (pid -> pid) applied first, then `outer` (pid -> ...): e.g. XCD chunking on top of grouped."""
    if linear.outputs != ("pid",):
        raise UserError("compose: the first order must be linear (yield pid), e.g. xcd")
    # Prefixing every temporary of the first order (its pid_m/pid_n included) means nothing it assigns can
    # survive into, or be overwritten by, the second order: only pid passes between them.
    first = _prefix_temporaries(linear, "swz0_", LINEAR_INTERFACE_NAMES)
    second = _prefix_temporaries(outer, "swz1_")
    # Drop the second header: it would reread the launch index and undo the first remap.
    second_lines = [
        line for line in second.normalized_source().splitlines() if line.replace(" ", "") != "pid=tl.program_id(0)"
    ]
    return parse_formula(first.normalized_source() + "\n".join(second_lines) + "\n", outer.outputs)


NEST_RE = re.compile(r"^(?P<outer>[^>@]+)>(?P<inner>[^>@]+)@(?P<bm>\d+)x(?P<bn>\d+)$")


def _rename_interface(formula: Formula, prefix: str, names: dict[str, str]) -> Formula:
    """`formula` without its program_id header, temporaries prefixed, interface names renamed to `names`."""
    body = [line for line in formula.normalized_source().splitlines() if line.replace(" ", "") != "pid=tl.program_id(0)"]
    bare = parse_formula("\n".join(body) + "\n", formula.outputs)
    mapping = {name: f"{prefix}{name.removeprefix('swz_')}" for name in bare.assigned_names if name not in names}
    mapping.update(names)
    return rename(bare, mapping)


def nest(outer: Formula, inner: Formula, block_m: int, block_n: int) -> Formula:
    """Two 2-D orders nested: the grid cut into block_m x block_n blocks, `outer` orders the blocks (on the grid
    of blocks), `inner` the tiles inside each block (on a block_m x block_n grid). Rows and columns left over
    when the grid is not a multiple of the block run after the blocks (the right strip row-major, then the bottom
    strip column by column), so
    any grid is covered exactly once whatever the two orders are (if each is a bijection on its own grid)."""
    for name, f in (("outer", outer), ("inner", inner)):
        if f.outputs != ("pid_m", "pid_n"):
            raise UserError(f"nest: the {name} order must be 2-D (yield pid_m, pid_n), e.g. serpentine or column_major")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if int(value) < 1:
            raise UserError(f"nest: {name}={value} must be >= 1")
    first = _rename_interface(outer, "swzo_", {"pid": "swzn_blk", "num_pid_m": "swzn_bm_count",
                                                "num_pid_n": "swzn_bn_count", "pid_m": "swzn_bm", "pid_n": "swzn_bn"})
    second = _rename_interface(inner, "swzi_", {"pid": "swzn_in", "num_pid_m": "swzn_block_m",
                                                 "num_pid_n": "swzn_block_n", "pid_m": "swzn_dm", "pid_n": "swzn_dn"})
    head = (
        HEADER
        + f"swzn_block_m = {int(block_m)}\n"
        f"swzn_block_n = {int(block_n)}\n"
        "swzn_full_m = num_pid_m // swzn_block_m\n"
        "swzn_full_n = num_pid_n // swzn_block_n\n"
        "swzn_size = swzn_block_m * swzn_block_n\n"
        "swzn_n_full = swzn_full_m * swzn_full_n * swzn_size\n"
        "swzn_in_full = pid < swzn_n_full\n"
        # Programs past the blocks still evaluate both orders (their results are discarded below): clamp so
        # they see a valid block index on a grid of at least one block.
        "swzn_bm_count = tl.maximum(swzn_full_m, 1)\n"
        "swzn_bn_count = tl.maximum(swzn_full_n, 1)\n"
        "swzn_blk = tl.where(swzn_in_full, pid // swzn_size, 0)\n"
        "swzn_in = pid % swzn_size\n"
    )
    tail = (
        "swzn_rest = pid - swzn_n_full\n"
        "swzn_right_w = num_pid_n - swzn_full_n * swzn_block_n\n"
        "swzn_right_count = swzn_full_m * swzn_block_m * swzn_right_w\n"
        "swzn_right_m = swzn_rest // tl.maximum(swzn_right_w, 1)\n"
        "swzn_right_n = swzn_full_n * swzn_block_n + swzn_rest % tl.maximum(swzn_right_w, 1)\n"
        "swzn_bottom = swzn_rest - swzn_right_count\n"
        # The bottom strip (under block_m rows, full width) column by column, as grouped runs its last group.
        "swzn_bottom_h = tl.maximum(num_pid_m - swzn_full_m * swzn_block_m, 1)\n"
        "swzn_bottom_m = swzn_full_m * swzn_block_m + swzn_bottom % swzn_bottom_h\n"
        "swzn_bottom_n = swzn_bottom // swzn_bottom_h\n"
        "swzn_in_right = swzn_rest < swzn_right_count\n"
        "pid_m = tl.where(swzn_in_full, swzn_bm * swzn_block_m + swzn_dm, "
        "tl.where(swzn_in_right, swzn_right_m, swzn_bottom_m))\n"
        "pid_n = tl.where(swzn_in_full, swzn_bn * swzn_block_n + swzn_dn, "
        "tl.where(swzn_in_right, swzn_right_n, swzn_bottom_n))\n"
    )
    return parse_formula(head + first.normalized_source() + second.normalized_source() + tail, ("pid_m", "pid_n"))


def _parse_nest_spec(part: str) -> Formula | None:
    """'OUTER>INNER@BMxBN' (e.g. 'serpentine>column_major@8x8') as a nested order; None if not that form."""
    match = NEST_RE.match(part.strip().replace(" ", ""))
    if match is None:
        if ">" in part or "@" in part:
            raise UserError(
                f"order {part!r}: a nested order is OUTER>INNER@BMxBN, e.g. serpentine>column_major@8x8 (blocks of "
                "8x8 tiles walked by serpentine, tiles inside a block by column_major)"
            )
        return None
    return nest(_parse_family_spec(match["outer"]), _parse_family_spec(match["inner"]), int(match["bm"]),
                int(match["bn"]))


def _parse_family_spec(part: str) -> Formula:
    nested = _parse_nest_spec(part)
    if nested is not None:
        return nested
    name, _, param_text = part.strip().partition(":")
    params: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in param_text.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"order {part!r}: parameter {item!r} must be NAME=VALUE, e.g. grouped:GROUP_M=8")
        params[key.strip()] = value.strip()
    return family(name.strip(), **params)


def parse_order(spec: str, rank: int = 2) -> Formula:
    """An order from a family spec ('grouped:GROUP_M=8', 'xcd:NUM_XCDS=8+grouped:GROUP_M=8') or a .py
    formula file, with outputs that fit a tile grid of `rank` dimensions."""
    spec = spec.strip()
    path = Path(spec)
    if spec.endswith(".py") or path.exists() or "/" in spec:
        formula = parse_formula(read_formula_file(path), rank=rank)
    else:
        if not spec:
            raise UserError("empty order: give a family such as grouped:GROUP_M=8 or a formula .py file")
        parts = spec.split("+")
        if any(not p.strip() for p in parts):
            raise UserError(
                f"order {spec!r} has an empty part: join families with one '+' between them, "
                "e.g. xcd:NUM_XCDS=8+grouped:GROUP_M=8"
            )
        formulas = [_parse_family_spec(p) for p in parts]
        formula = formulas[-1]
        for linear in reversed(formulas[:-1]):
            formula = compose(linear, formula)
    if rank == 2 and formula.outputs == ("pid",):
        formula = compose(formula, family("identity"))
    if rank == 1 and formula.outputs != ("pid",):
        raise FormulaError(
            f"order {spec!r} yields {', '.join(formula.outputs)} but this grid is 1-D: use a linear order "
            f"({', '.join(n for n, f in FAMILIES.items() if f.kind == 'linear')})"
        )
    return formula


def family_names(kind: str | None = None) -> list[str]:
    """Family names, optionally only those of one kind ('linear' or '2d')."""
    return [name for name, f in FAMILIES.items() if kind is None or f.kind == kind]


# ---- Wave-aware orders (added by the simulator work, issue 15) ----------------------------------------------
# Programs resident at once (SMs x occupancy: 264 on an H100 at 2 per SM) form a wave; what the next wave can
# reuse is what the last one left in L2. These orders walk bands of GROUP_M tile rows and turn around at the
# end of each band (serpentine), so the first programs of a band reuse the column panels the last programs
# of the previous band just read. Compose them with `xcd` on multi-domain GPUs.


def _grouped_serpentine(GROUP_M: int) -> str:
    return _group_rows(GROUP_M) + (
        "col = (pid % num_pid_in_group) // group_size_m\n"
        "pid_n = tl.where(group_id % 2 == 1, num_pid_n - 1 - col, col)\n"
    )


def _wave(GROUP_M: int, BLOCK_N: int) -> str:
    # Bands of GROUP_M rows cut into blocks of BLOCK_N columns (a block about one wave of programs), row by
    # row inside a block, blocks left to right, every other band right to left.
    return (
        f"GROUP_M = {GROUP_M}\n"
        f"BLOCK_N = {BLOCK_N}\n"
        "num_pid_in_band = GROUP_M * num_pid_n\n"
        "band = pid // num_pid_in_band\n"
        "in_band = pid % num_pid_in_band\n"
        "band_h = tl.minimum(num_pid_m - band * GROUP_M, GROUP_M)\n"
        "blk = in_band // (band_h * BLOCK_N)\n"
        "in_blk = in_band % (band_h * BLOCK_N)\n"
        "blk_w = tl.minimum(BLOCK_N, num_pid_n - blk * BLOCK_N)\n"
        "col = blk * BLOCK_N + in_blk % blk_w\n"
        "pid_m = band * GROUP_M + in_blk // blk_w\n"
        "pid_n = tl.where(band % 2 == 1, num_pid_n - 1 - col, col)\n"
    )


FAMILIES["grouped_serpentine"] = Family(
    "grouped_serpentine",
    "2d",
    "grouped (GROUP_M rows, column by column), every other group right to left so the next group starts on "
    "the columns the last one ended on",
    (Param("GROUP_M", 8, "rows per group"),),
    _grouped_serpentine,
)
FAMILIES["wave"] = Family(
    "wave",
    "2d",
    "bands of GROUP_M rows cut into GROUP_M x BLOCK_N blocks (about one wave of resident programs), row by row "
    "inside a block, every other band right to left",
    (Param("GROUP_M", 16, "rows per band"), Param("BLOCK_N", 16, "columns per block")),
    _wave,
)
