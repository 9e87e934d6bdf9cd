"""CRC32C (Castagnoli), the checksum brandrt's index keeps of every file:
crc32c(data) -> int, as Go's crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)).

Python's standard library has only the other CRC-32 (zlib's), so this
uses, in order: the `crc32c` or `google_crc32c` module when one is
importable (C, several GB/s); numpy, which is always there beside torch;
a table in pure Python. Speeds measured with /usr/bin/python3 3.11 and
numpy 1.24 on the 2-core test machine (python/tests/test_records.py
prints them with BRANDRT_CRC_SPEED=1):

    numpy, 4 KiB            0.26 ms    16 MB/s
    numpy, 110 KB           0.5 ms     ~200 MB/s
    numpy, 4 MiB            11 ms      ~370 MB/s
    pure Python             9 ms/110 KB  12 MB/s (numpy's path below 2 KiB)

(The rank's Go CRC32C runs at about 11 GB/s here. With numpy the check
costs a training process about half a millisecond of CPU per 110 KB
file, a fraction of what decoding such a JPEG takes.)

The numpy path computes the CRC of 64-byte lanes side by side (one
lookup in a 65536-entry table per two bytes, for all lanes at once), then
joins neighbouring lanes' CRCs in a tree: the CRC is linear, so a lane's
CRC is moved past the bytes after it by a fixed 32x32 bit matrix per
level, applied as four 256-entry tables.
"""

__all__ = ["crc32c", "backend"]

_POLY = 0x82F63B78  # Castagnoli, reflected


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _crc_python(data, crc=0):
    """The raw CRC register after data, from crc (no inversions)."""
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def crc32c_python(data):
    """CRC32C of data in pure Python (any bytes-like object)."""
    return _crc_python(memoryview(data).cast("B"), 0xFFFFFFFF) ^ 0xFFFFFFFF


try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy comes with torch
    _np = None

_LANE = 64  # bytes each lane of the numpy path takes
_SMALL = 2048  # below this, pure Python is as fast
_shifts = []  # per tree level: four tables moving a CRC past 64 * 2**level zero bytes
_table16 = []  # the register after two bytes (a u16, little-endian) from 0


def _two_bytes():
    """The table of two bytes at a time: one lookup for both."""
    if not _table16:
        t = _np.array(_TABLE, dtype=_np.uint32)
        x = _np.arange(1 << 16, dtype=_np.uint32)
        c = t[x & 0xFF]
        _table16.append(t[(c ^ (x >> 8)) & 0xFF] ^ (c >> 8))
    return _table16[0]


def _shift_tables(level):
    """The tables of level: moving a CRC register past _LANE * 2**level zero
    bytes, as four lookups (one per byte of the register)."""
    while len(_shifts) <= level:
        if not _shifts:
            basis = _np.array([1 << b for b in range(32)], dtype=_np.uint32)
            t = _np.array(_TABLE, dtype=_np.uint32)
            for _ in range(_LANE):
                basis = t[basis & 0xFF] ^ (basis >> 8)
        else:  # twice the previous level's shift
            basis = _apply(_shifts[-1], _apply(_shifts[-1], _np.array([1 << b for b in range(32)], dtype=_np.uint32)))
        v = _np.arange(256, dtype=_np.uint32)
        tables = []
        for byte in range(4):
            tab = _np.zeros(256, dtype=_np.uint32)
            for bit in range(8):
                tab[(v >> bit) & 1 == 1] ^= basis[8 * byte + bit]
            tables.append(tab)
        _shifts.append(tables)
    return _shifts[level]


def _apply(tables, x):
    a, b, c, d = tables
    return a[x & 0xFF] ^ b[(x >> 8) & 0xFF] ^ c[(x >> 16) & 0xFF] ^ d[x >> 24]


def crc32c_numpy(data):
    """CRC32C of data with numpy (any bytes-like object)."""
    src = _np.frombuffer(data, dtype=_np.uint8)
    n = len(src)
    if n < _SMALL:
        return crc32c_python(data)
    lanes = -(-n // _LANE)
    # Zero bytes in front change nothing for a register that starts at 0;
    # starting at ~0 is the same as inverting the first four bytes.
    buf = _np.zeros(lanes * _LANE, dtype=_np.uint8)
    buf[len(buf) - n :] = src
    buf[len(buf) - n : len(buf) - n + 4] ^= 0xFF
    cols = _np.ascontiguousarray(buf.view("<u2").reshape(lanes, _LANE // 2).T)
    t = _two_bytes()
    crc = _np.zeros(lanes, dtype=_np.uint32)
    idx = _np.empty(lanes, dtype=_np.uint32)
    for col in cols:  # two bytes of every lane
        _np.bitwise_xor(crc, col, out=idx)
        idx &= 0xFFFF
        crc >>= 16
        crc ^= t[idx]
    level = 0
    while len(crc) > 1:
        if len(crc) & 1:  # a lane of zeros in front: the same CRC
            crc = _np.concatenate((_np.zeros(1, dtype=_np.uint32), crc))
        crc = _apply(_shift_tables(level), crc[0::2]) ^ crc[1::2]
        level += 1
    return int(crc[0]) ^ 0xFFFFFFFF


def _pick():
    try:
        import crc32c as mod

        return mod.crc32c, "crc32c module"
    except ImportError:
        pass
    try:
        import google_crc32c as mod

        return mod.value, "google_crc32c module"
    except ImportError:
        pass
    if _np is not None:
        return crc32c_numpy, "numpy"
    return crc32c_python, "pure Python"


crc32c, backend = _pick()
