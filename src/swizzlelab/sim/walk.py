"""The L2 set walk shared by the CPU engine (numba njit) and the GPU backend (numba.cuda device function).

Plain Python functions without calls, compiled by each target, so both run the same model on the same records.
"""

from __future__ import annotations

# A record is one line access, packed so the walk reads 8 bytes plus its set: line << 8 | near partition << 5 |
# store << 4 | sector mask (4 sectors of a 128-byte line). Its set word is set index << pbits | home partition.
REC_LINE_SHIFT = 8
REC_NEAR_SHIFT = 5
REC_WRITE_SHIFT = 4
MAX_PARTITIONS = 8  # near partitions fit 3 bits of a record

# Columns of a statistics row (int64), as the simulator reports them.
ST_REQ_SECTORS = 0
ST_HIT_SECTORS = 1
ST_LINE_ACCESSES = 2
ST_LINE_HITS = 3
ST_DRAM_READ_SECTORS = 4
ST_DRAM_WRITE_SECTORS = 5
ST_EVICTIONS = 6
ST_PROGRAMS = 7
ST_LOOKUP_SECTORS = 8  # near lookups + lookups at a far home partition (what ncu's lts__t_sectors counts)
ST_LINE_LOOKUPS = 9
ST_FABRIC_SECTORS = 10  # sectors that crossed to a far partition
ST_TCC_HITS = 11  # line requests that hit as AMD's TCC_HIT counts them
ST_WRITEBACK_LINES = 12  # dirty lines written back to DRAM (evicted or left at the end): DRAM write requests
N_STATS = 13


EMPTY = -256  # an unused way: line -1 (no line), no valid or dirty sectors


def set_words(ways):
    """int64 words per set: one entry per way."""
    return ways


def new_sets(n_sets, ways, xp):
    """`n_sets` empty sets (array module `xp`: NumPy or CuPy)."""
    return xp.full(n_sets * ways, EMPTY, dtype=xp.int64)


# size: compiled for the CPU (njit) and for CUDA (a device function) from this one text, so it calls nothing: the near
# and the home partition's lookups are written out each, and its arrays and scalars are separate arguments.
def walk_records(rec, shw, lo, hi, pbits, n_partitions, ways, sets, stats, row, got, pair):
    """Run records lo..hi-1 (in order) through their sets and add the counts to stats[row].

    A set (index st, partition p) is `ways` int64 entries at (st * n_partitions + p) * ways, most recently used
    first, each line << 8 | dirty sectors << 4 | valid sectors, unused ways EMPTY (after the used ones). A read
    looks up its near partition; on a miss of a far-homed line it looks up the home partition over the fabric (a
    second lookup, counted as the hardware counts it) and keeps a copy near. A store passes the near partition
    (a lookup counted as a hit; it updates a near copy without allocating) and is kept at its home partition:
    write-back, write-allocate without a DRAM read. Sector hits are counted as ncu's lts__t_sector_hit_rate
    counts them (a store hits); line requests as AMD's TCC_HIT counts them (a store hits only a present line, a
    read only if every requested sector is valid). When `got` is non-empty, got[r] is the sector mask record r
    read from DRAM (0: none), for a memory-side cache behind the L2s. With `pair` = 1 a read miss fetches the
    aligned 64-byte pair of each missing sector (Hopper's DRAM access granularity: an H100 transpose whose tiles
    read 16 bytes per row read 4x their bytes from DRAM in ncu when no neighbour reused them); the partner
    sector becomes valid at the partition that fetched it, and DRAM reads count both.

    Lookups stop at the match, moving the entries they pass in the same loop: recently used lines are found
    after a few compares (a branch-free compare of every way measured 1.6x slower on matmul 8192, one thread).
    """
    req = 0
    hit_sectors = 0
    accesses = 0
    line_hits = 0
    dram_read = 0
    evictions = 0
    dram_write = 0
    fabric = 0
    lookups = 0
    line_lookups = 0
    tcc_hits = 0
    writebacks = 0
    record = got.shape[0] > 0
    pmask = (1 << pbits) - 1
    for r in range(lo, hi):
        x = rec[r]
        line = x >> 8
        near = (x >> 5) & 7
        w = (x >> 4) & 1
        m = x & 15
        s = shw[r]
        st = s >> pbits
        home = s & pmask
        c = (m & 5) + ((m >> 1) & 5)
        pm = (c & 3) + (c >> 2)
        req += pm
        lookups += pm
        accesses += 1
        line_lookups += 1
        group = st * n_partitions
        if w != 0 and home != near:
            # A far store passes the near partition (counted as a hit; updates a near copy, no allocation).
            lookups += pm
            hit_sectors += pm
            fabric += pm
            line_lookups += 1
            nb = (group + near) * ways
            for i in range(ways):
                if (sets[nb + i] >> 8) == line:
                    line_hits += 1
                    sets[nb + i] = sets[nb + i] | m
                    break
        first = home if w != 0 else near
        base = (group + first) * ways
        # One pass finds the line and moves every entry before it one way toward the LRU end (all of them on a
        # miss, which leaves the LRU entry in `t`); the entry used goes to the front below.
        t = sets[base]
        found = (t >> 8) == line
        if not found:
            for i in range(1, ways):
                u = sets[base + i]
                sets[base + i] = t
                t = u
                if (u >> 8) == line:
                    found = True
                    break
        missing = m
        if found:
            e = t
            line_hits += 1
            v = e & 15
            missing = m & ~v
            if w != 0:
                hit_sectors += pm
                tcc_hits += 1
                e = e | m | (m << 4)
            else:
                c = (m & v & 5) + (((m & v) >> 1) & 5)
                hit_sectors += (c & 3) + (c >> 2)
                if missing == 0:
                    tcc_hits += 1
                e = e | m
        else:
            if t != EMPTY:
                d = (t >> 4) & 15
                c = (d & 5) + ((d >> 1) & 5)
                dram_write += (c & 3) + (c >> 2)
                if d != 0:
                    writebacks += 1
                evictions += 1
            e = (line << 8) | m
            if w != 0:
                hit_sectors += pm
                e = e | (m << 4)
        fetched = 0
        if missing != 0 and w == 0 and first == home:
            fetched = missing
            if pair != 0:
                fetched = missing | ((((missing & 5) << 1) | ((missing >> 1) & 5)) & ~(e & 15))
                e = e | fetched
        sets[base] = e
        if missing != 0 and w == 0:
            if first != home:
                c = (missing & 5) + ((missing >> 1) & 5)
                pmiss = (c & 3) + (c >> 2)
                fabric += pmiss
                lookups += pmiss
                line_lookups += 1
                hb = (group + home) * ways
                t = sets[hb]
                found = (t >> 8) == line
                if not found:
                    for i in range(1, ways):
                        u = sets[hb + i]
                        sets[hb + i] = t
                        t = u
                        if (u >> 8) == line:
                            found = True
                            break
                if found:
                    line_hits += 1
                    he = t
                else:
                    if t != EMPTY:
                        d = (t >> 4) & 15
                        c = (d & 5) + ((d >> 1) & 5)
                        dram_write += (c & 3) + (c >> 2)
                        if d != 0:
                            writebacks += 1
                        evictions += 1
                    he = line << 8
                hv = he & 15
                c = (missing & hv & 5) + (((missing & hv) >> 1) & 5)
                hit_sectors += (c & 3) + (c >> 2)
                fetched = missing & ~hv
                if pair != 0:
                    fetched = (fetched | ((fetched & 5) << 1) | ((fetched >> 1) & 5)) & ~hv
                sets[hb] = he | missing | fetched
            c = (fetched & 5) + ((fetched >> 1) & 5)
            dram_read += (c & 3) + (c >> 2)
        if record:
            got[r] = fetched
    stats[row, ST_REQ_SECTORS] += req
    stats[row, ST_HIT_SECTORS] += hit_sectors
    stats[row, ST_LINE_ACCESSES] += accesses
    stats[row, ST_LINE_HITS] += line_hits
    stats[row, ST_DRAM_READ_SECTORS] += dram_read
    stats[row, ST_DRAM_WRITE_SECTORS] += dram_write
    stats[row, ST_EVICTIONS] += evictions
    stats[row, ST_LOOKUP_SECTORS] += lookups
    stats[row, ST_LINE_LOOKUPS] += line_lookups
    stats[row, ST_FABRIC_SECTORS] += fabric
    stats[row, ST_TCC_HITS] += tcc_hits
    stats[row, ST_WRITEBACK_LINES] += writebacks


def flush_sets(sets, st_lo, st_hi, n_partitions, ways, stats, row):
    """Add the dirty sectors still held by sets st_lo..st_hi-1 (every partition) to stats[row]: the write-back at
    the end of the kernel (unused ways hold none)."""
    written = 0
    lines = 0
    for i in range(st_lo * n_partitions * ways, st_hi * n_partitions * ways):
        d = (sets[i] >> 4) & 15
        c = (d & 5) + ((d >> 1) & 5)
        written += (c & 3) + (c >> 2)
        if d != 0:
            lines += 1
    stats[row, ST_DRAM_WRITE_SECTORS] += written
    stats[row, ST_WRITEBACK_LINES] += lines
