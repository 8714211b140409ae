"""Counter-based noise: every random number is a hash of (key, counter), never the state of a generator.

That is what makes the simulator a pure function of time: the value at a timestamp does not depend on which
other timestamps were computed before, so a live scrape and a backfill agree sample for sample.
"""

from __future__ import annotations

import hashlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TO_UNIT = 2.0**-53


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic): a bijective 64-bit mix."""
    z = np.asarray(x).astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += _GOLDEN
        z = (z ^ (z >> _S30)) * _MUL1
        z = (z ^ (z >> _S27)) * _MUL2
    return np.asarray(z ^ (z >> _S31))


def mix(*parts: np.ndarray | int) -> np.ndarray:
    """Hash of several integer arrays (broadcast together); order matters.

    Put the small parts (slot key, stream constant) first: the parts are folded in left to right, so only the
    steps after the first full-size part run on the full ``(T, S)`` shape.
    """
    out = splitmix64(np.asarray(parts[0]).astype(np.int64).view(np.uint64))
    for part in parts[1:]:
        word = np.asarray(part).astype(np.int64).view(np.uint64)
        out = splitmix64(out ^ word)
    return out


def uniform(*parts: np.ndarray | int) -> np.ndarray:
    """Uniform floats in [0, 1) hashed from ``parts``."""
    return (mix(*parts) >> np.uint64(11)).astype(np.float64) * _TO_UNIT


def normal(*parts: np.ndarray | int) -> np.ndarray:
    """Standard normal floats hashed from ``parts`` (Box-Muller on two uniforms from one hash and its remix)."""
    h = mix(*parts)
    u1 = (h >> np.uint64(11)).astype(np.float64) * _TO_UNIT
    u2 = (splitmix64(h) >> np.uint64(11)).astype(np.float64) * _TO_UNIT
    return np.asarray(np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2))


def stable_key(text: str) -> int:
    """A 63-bit integer for a name, identical on every machine and Python run (unlike ``hash``)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def stable_hex(text: str, n_chars: int) -> str:
    """``n_chars`` hex digits derived from a name (for UUIDs)."""
    return hashlib.blake2b(text.encode(), digest_size=(n_chars + 1) // 2).hexdigest()[:n_chars]


def scramble(values: np.ndarray, bits: int, salt: int) -> np.ndarray:
    """A bijection of ``[0, 2**bits)``: distinct inputs give distinct, random-looking outputs.

    Odd multiplications and xor-shifts are each invertible modulo ``2**bits``, so their composition is too.
    """
    mask = (1 << bits) - 1
    half = max(1, bits // 2)
    x = (np.asarray(values).astype(np.int64) ^ (salt & mask)) & mask
    x = (x * 0x2C1B3C6D) & mask  # odd multipliers keep the map one-to-one
    x ^= x >> half
    x = (x * 0x297A2D39) & mask
    x ^= x >> half
    return x
