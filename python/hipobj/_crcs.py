"""A writer's CRC64NVME of each item it stores, and the check of any range a reader takes of it
(issue 55: every landed byte checked, ranged reads included).

A CRC of a whole item checks a read of the whole item only: a range of it has no CRC of its own,
and the CRC of the rest cannot be had without its bytes. So a writer that knows readers take
ranges (DCP's resharding reads boxes of stored chunks; ``hipobj.safetensors.load`` reads single
tensors) records, besides the item's CRC64NVME, the CRC64NVME of each ``block`` bytes of it (the
last block shorter). A reader checks bytes ``lo..hi`` of an item against the run of whole blocks
that covers them: it reads the blocks' bytes outside ``lo..hi`` as well (at most one block before
and one after), computes the CRC of what landed and of those edges, and compares their combination
with the combination of the writer's block CRCs (both by the library's CRC combination,
``_core.crc_combine``; no second pass over the bytes). A read of whole blocks needs no edge.

The values are S3's encoding (base64 of the big-endian digest), as ``_core.crc_of`` gives them."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _core
from ._core import ChecksumMismatchError, InvalidValueError

CRC = "CRC64NVME"
# The writers' block: a ranged read costs at most one block more at each end (no more than two
# small extra GETs, or one staged GET when the read lies inside one block), and the metadata holds
# one 12-character value per MiB stored (about 12 KiB per GiB).
BLOCK = 1 << 20


def of_segment(segment: Any) -> str:
    """The CRC64NVME of a segment's bytes (``_pinned.Segment``: registered memory, read where it
    lies, or host bytes of a Session without an RDMA runtime)."""
    if isinstance(segment, (memoryview, bytes, bytearray)):
        return _core.crc_of_buffer(segment, CRC)
    reg, offset, size = segment
    return _core.crc_of(reg, offset, size, CRC)


def blocks_of_segment(segment: Any, block: int) -> List[str]:
    """The CRC64NVME of each `block` bytes of a segment's bytes (the last block shorter)."""
    if isinstance(segment, (memoryview, bytes, bytearray)):
        return _core.crc_blocks_of_buffer(segment, block, CRC)
    reg, offset, size = segment
    return _core.crc_blocks(reg, offset, size, block, CRC)


def combine(pieces: Sequence[Tuple[str, int]]) -> str:
    """The CRC64NVME of pieces in a row, from each one's (CRC64NVME, length)."""
    return _core.crc_combine([(crc, n) for crc, n in pieces if n], CRC)


def record(segment: Any, size: int, block: int = BLOCK) -> Dict[str, Any]:
    """What a writer keeps of an item of `size` bytes it stores from `segment`: ``CRC64NVME`` (the
    whole item's) and, when the item is longer than one block, ``block`` and ``blocks`` (one
    CRC64NVME per block). One pass over the bytes: the whole item's value is the blocks'
    combination."""
    if size <= block:
        return {CRC: of_segment(segment), "block": block}
    blocks = blocks_of_segment(segment, block)
    return {CRC: combine([(c, min(block, size - i * block)) for i, c in enumerate(blocks)]), "block": block, "blocks": blocks}


@dataclasses.dataclass
class Span:
    """What a read of an item is checked against: the writer's CRC64NVME of the item's bytes
    ``lo..hi`` (the read's bytes widened to whole blocks)."""

    lo: int
    hi: int
    crc: str


def span_for(recorded: Optional[Dict[str, Any]], length: int, lo: int, hi: int, where: str) -> Union[Span, str]:
    """The writer's CRC64NVME covering bytes `lo..hi` of an item of `length` bytes whose record
    (``record``'s dict, or an older writer's with only ``CRC64NVME``) is `recorded`, or why the
    read cannot be checked (a str)."""
    whole = (recorded or {}).get(CRC)
    if not isinstance(whole, str):
        return "the writer recorded no CRC64NVME of this item"
    if lo == 0 and hi == length:
        return Span(0, length, whole)
    block = recorded.get("block")  # type: ignore[union-attr]
    if block is None:
        return "a part of an item whose writer recorded only the whole item's CRC64NVME"
    if not isinstance(block, int) or block <= 0:
        raise InvalidValueError(f"{where}: the writer's CRC block size {block!r} is not a positive integer")
    count = -(-length // block)
    blocks = recorded.get("blocks") if count > 1 else [whole]  # type: ignore[union-attr]
    if not isinstance(blocks, list) or len(blocks) != count:
        raise InvalidValueError(f"{where}: the writer's CRC64NVME blocks do not cover the item's {length} bytes")
    first, end = lo // block, -(-hi // block)
    wlo, whi = first * block, min(end * block, length)
    if (wlo, whi) == (0, length):
        return Span(0, length, whole)
    return Span(wlo, whi, combine([(blocks[i], min(block, length - i * block)) for i in range(first, end)]))


def mismatch(what: str, got: str, want: str) -> ChecksumMismatchError:
    """What a read that landed the wrong bytes twice raises: the algorithm, the item and both
    values, as attributes too (``algorithm``, ``expected``: the writer's, ``actual``)."""
    err = ChecksumMismatchError(f"{what}: {CRC} of what landed is {got}, the writer's is {want} (read twice)")
    err.algorithm, err.expected, err.actual = CRC, want, got
    return err


class Tally:
    """What a reader checked, item by item: ``stats`` counts ``verified`` and ``unchecked`` items
    (and ``retried``: reads that landed wrong bytes once and right ones the second time);
    ``checks`` maps each item to its verdict ("CRC64NVME verified", "unchecked: <why>")."""

    def __init__(self, stats: Dict[str, Any], checks: Dict[str, str]):
        self.stats, self.checks = stats, checks
        for name in ("verified", "unchecked", "retried"):
            stats.setdefault(name, 0)

    def verified(self, item: str, verdict: str = f"{CRC} verified") -> None:
        self.stats["verified"] += 1
        self.checks[item] = verdict

    def unchecked(self, item: str, why: str) -> None:
        self.stats["unchecked"] += 1
        self.checks[item] = f"unchecked: {why}"
