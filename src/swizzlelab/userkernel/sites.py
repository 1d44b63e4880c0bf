"""Every remap a kernel runs, not only the first: the site an order replaces, the same remap written again inline
elsewhere (its twins: stream-K's data-parallel and stream-K phases, one remap in two loops), spliced with the same
order, and other remaps, named so that a run can say which it took.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from swizzlelab.errors import KernelSiteError
from swizzlelab.swizzle.site import remap_sites
from swizzlelab.userkernel.marked import Twin
from swizzlelab.userkernel.tiles import SiteSpan


@dataclass(frozen=True)
class OtherSite:
    """A remap of the kernel that is neither the site nor a twin of it: lines [start, stop), what it yields."""

    start: int
    stop: int
    outputs: tuple[str, ...]
    index: str | None


def _statements(lines: list[str], start: int, stop: int) -> list[ast.stmt]:
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines[start:stop])))
    except SyntaxError:
        return []
    return [s for s in tree.body if not isinstance(s, ast.Expr)]  # tl.assume hints are no part of the remap


def _free(stmts: list[ast.stmt]) -> set[str]:
    """Names the statements read before they assign them."""
    assigned: set[str] = set()
    free: set[str] = set()
    for stmt in stmts:
        free |= {n.id for n in ast.walk(getattr(stmt, "value", stmt)) if isinstance(n, ast.Name)} - assigned
        assigned |= {n.id for t in getattr(stmt, "targets", []) for n in ast.walk(t) if isinstance(n, ast.Name)}
    return free


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self.new if node.id == self.old else node.id, ctx=node.ctx), node)


def _same_remap(site: list[ast.stmt], other: list[ast.stmt]) -> str | None:
    """The launch index `other` reads where `site` reads its own, when both are one remap over different (or the
    same) index names; None when they differ otherwise."""
    if len(site) != len(other) or not site:
        return None
    mine, theirs = _free(site) - _free(other), _free(other) - _free(site)
    if len(mine) > 1 or len(theirs) != len(mine):
        return None
    old, new = (next(iter(mine)), next(iter(theirs))) if mine else (None, None)
    for a, b in zip(site, other):
        a = _Rename(old, new).visit(ast.parse(ast.unparse(a)).body[0]) if old else a  # type: ignore[arg-type]
        if ast.dump(a, annotate_fields=False) != ast.dump(b, annotate_fields=False):
            return None
    return new or ""


def promoted(source: str, site: SiteSpan, kernel_name: str) -> tuple[SiteSpan, str | None]:
    """(the site, the launch index its block remaps: the loop variable or a name read from outside the block;
    None where the block reads the program id itself). The site found is the bare program-id line, and the
    kernel remaps that index further down (stream-K's data-parallel phase under `if pid < total_ddp_tiles:`):
    that remap."""
    if site.loop_var:
        return site, site.loop_var
    if site.stop - site.start != 1 or len(site.outputs) != 1:
        return site, None
    index = site.outputs[0]
    # not inside a loop: there the index may be carried and stepped (tutorial 08's `tile_idx += NUM_SM`)
    loops = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.For, ast.While))]
    remaps = [s for s in _remaps(source, kernel_name) if s.index_name == index and s.start >= site.stop
              and not any(lo <= s.start + 1 <= hi for lo, hi in loops)]
    if not remaps:
        return site, None
    first = remaps[0]
    return SiteSpan(first.start, first.stop, tuple(first.outputs), None,
                    f"found automatically: the remap of {index} further down"), index


def _remaps(source: str, kernel_name: str) -> list:
    try:
        return remap_sites(source, kernel_name)
    except (KernelSiteError, SyntaxError):
        return []


def inline_twins(source: str, site: SiteSpan, index: str | None, helper_twins: tuple[Twin, ...] = ()) -> tuple[Twin, ...]:
    """The site's remap of `index` (its loop variable, or the launch index it remaps) written again after it at any
    nesting, each as a Twin over the index it reads there; () for a site that reads the program id itself."""
    if index is None:
        return ()
    lines = source.splitlines()
    own = _dependent(_statements(lines, site.start, site.stop), index)
    if not own:
        return ()
    taken = {(t.start, t.stop) for t in helper_twins}
    twins: list[Twin] = []
    for node in ast.walk(ast.parse(source)):
        for block in (getattr(node, "body", None), getattr(node, "orelse", None)):
            if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
                continue
            plain = [s for s in block if not isinstance(s, ast.Expr)]
            for i in range(len(plain) - len(own) + 1):
                run = plain[i:i + len(own)]
                start, stop = run[0].lineno - 1, run[-1].end_lineno or run[-1].lineno
                if start < site.stop or (start, stop) in taken:
                    continue
                theirs = _same_remap(own, run)
                if theirs is None:
                    continue
                targets = tuple(_target(run, own, out) for out in site.outputs)
                indent = re.match(r"\s*", lines[start]).group(0)  # type: ignore[union-attr]
                twins.append(Twin(start, stop, theirs or index, targets, indent, inline=True))
                taken.add((start, stop))
    return tuple(sorted(twins, key=lambda t: t.start))


def _dependent(block: list[ast.stmt], index: str) -> list[ast.stmt]:
    """The lines of a site's block that depend on its launch index (the others are hoisted before it in the
    marked copies: no part of the remap a twin must repeat)."""
    tainted = {index}
    out = []
    for stmt in block:
        reads = {n.id for n in ast.walk(getattr(stmt, "value", stmt)) if isinstance(n, ast.Name)}
        if reads & tainted:
            tainted |= {n.id for t in getattr(stmt, "targets", []) for n in ast.walk(t) if isinstance(n, ast.Name)}
            out.append(stmt)
    return out


def _target(run: list[ast.stmt], own: list[ast.stmt], output: str) -> str:
    """The name `run` assigns at the place the site's block assigns `output`."""
    for mine, theirs in zip(own, run):
        names = [t.id for t in getattr(mine, "targets", []) if isinstance(t, ast.Name)]
        if output in names:
            return theirs.targets[0].id  # type: ignore[attr-defined]
    return output


def others(source: str, site: SiteSpan, twins: tuple[Twin, ...], kernel_name: str) -> tuple[OtherSite, ...]:
    """Remaps of the kernel that are neither the site nor one of its twins."""
    covered = [(site.start, site.stop)] + [(t.start, t.stop) for t in twins]
    tree = ast.parse(source)
    loaded: set[str] = set()  # names computed from memory (a grouped GEMM's per-problem sizes): not a launch's order
    for _ in range(8):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and ("tl.load(" in ast.unparse(node.value)
                                                 or {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & loaded):
                loaded |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    blocks = {(n.left.id if isinstance(n.left, ast.Name) else "", n.right.id if isinstance(n.right, ast.Name) else "")
              for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)}
    out = []
    for remap in _remaps(source, kernel_name):
        if any(remap.start < stop and start < remap.stop for start, stop in covered):
            continue
        reads = _free(_statements(source.splitlines(), remap.start, remap.stop))
        # tile ids become offsets as `tile * BLOCK` (not `off_z * stride_qz`, a batch index split)
        tiled = any(({a, b} & set(remap.outputs)) and "BLOCK" in (b if a in remap.outputs else a).upper() for a, b in blocks)
        if reads & loaded or not tiled:
            continue
        out.append(OtherSite(remap.start, remap.stop, tuple(remap.outputs), remap.index_name))
    return tuple(out)
