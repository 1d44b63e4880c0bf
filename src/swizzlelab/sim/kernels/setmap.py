"""Where a line lives in the modelled L2 (numba): its set and home partition under each set map, and the
partition near each program (the far-L2 / partition model every engine shares).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_SET_SALT = np.uint64(0x2545F4914F6CDD1D)
_HOME_SALT = np.uint64(0x5BD1E9955BD1E995)
_UNIT_SALT = np.uint64(0x94D049BB133111EB)


def popcount_table() -> np.ndarray:
    """Number of set bits of each byte value (sector masks have at most 8 sectors)."""
    return np.array([bin(v).count("1") for v in range(256)], dtype=np.int64)


@njit(cache=True, inline="always")
def _bucket(line: np.int64, salt: np.uint64, n: np.int64) -> np.int64:
    """A hashed bucket 0..n-1 of a line (multiply-shift range reduction: no division in the hot loop)."""
    x = (np.uint64(line) ^ salt) * _MIX
    x = (x ^ (x >> np.uint64(31))) * _GOLDEN
    return np.int64(((x >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


def near_partition(position: int, n_partitions: int) -> int:
    """The L2 partition the engines put near the program at launch position `position` (the hash each program's slot
    takes when it loads one): for a measured schedule replayed under the model's own map."""
    return int(_bucket(np.int64(position), _UNIT_SALT, np.int64(n_partitions))) if n_partitions > 1 else 0


def home_partition(line: int, n_partitions: int) -> int:
    """The home L2 partition of a line under the hashed set map (`_set_and_home`, set map 0)."""
    return int(_bucket(np.int64(line), _HOME_SALT, np.int64(n_partitions))) if n_partitions > 1 else 0


@njit(cache=True, inline="always")
def _block_permutation(x: np.int64, limit: np.int64, key: np.uint64) -> np.int64:
    """A pseudo-random permutation of 0..limit-1 chosen by `key`: a 4-round Feistel network on the smallest even
    number of bits that holds limit, walked until it lands below limit (at most 4 steps expected)."""
    bits = np.int64(2)
    while (np.int64(1) << bits) < limit:
        bits += 2
    half = bits // 2
    mask = (np.int64(1) << half) - 1
    while True:
        left = x >> half
        right = x & mask
        for rnd in range(4):
            f = _bucket(right + (np.int64(rnd) << 40), key, mask + 1)
            left, right = right, left ^ f
        x = (left << half) | right
        if x < limit:
            return x


@njit(cache=True, inline="always")
def _set_and_home(line: np.int64, n_sets: np.int64, n_partitions: np.int64, set_map: np.int64):
    """(set index, home partition) of a line, by `set_map`:
    0 hashed: each a hash of the line;
    1 interleaved: the n_sets x n_partitions slots of each block of that many consecutive lines take one line each,
      in turn from a hashed offset per block;
    2 permuted: each block's lines take the slots in a pseudo-random order of the block's own.
    1 and 2 fill every set and partition evenly with a contiguous buffer, as the H100's L2 does; 2 also scatters
    lines a power of two apart as a hash does (benchmarks/sim_validation/dup_probe_*.json), where 1 keeps them in
    a few sets of one partition."""
    if set_map != 0:
        slots = n_sets * n_partitions
        q = line // slots
        r = line - q * slots
        if set_map == 1:
            idx = (r + _bucket(q, _SET_SALT, slots)) % slots
        else:
            key = (np.uint64(q) ^ _HOME_SALT) * _MIX
            idx = _block_permutation(r, slots, key ^ (key >> np.uint64(29)))
        st = idx // n_partitions
        return st, idx - st * n_partitions
    st = _bucket(line, _SET_SALT, n_sets) if n_sets > 1 else 0
    home = _bucket(line, _HOME_SALT, n_partitions) if n_partitions > 1 else 0
    return st, home


@njit(cache=True, nogil=True)
def set_index_of(lines: np.ndarray, n_sets: np.int64, n_partitions: np.int64, pbits: np.int64, out: np.ndarray,
                 first: np.int64, last: np.int64, set_map: np.int64 = 0) -> None:
    """out[a] = set index << pbits | home partition of lines[a], for a in first..last-1 (the map `run_domain`
    uses, `_set_and_home`; n_partitions <= 2 ** pbits)."""
    for a in range(first, last):
        st, home = _set_and_home(lines[a], n_sets, n_partitions, set_map)
        out[a] = (st << pbits) | home
