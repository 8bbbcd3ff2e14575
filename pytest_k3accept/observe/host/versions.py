"""Driver and CUDA version strings: parsing and comparison.

NVIDIA driver versions are written as a branch (``"580"``, ``"R580"``, ``"r580"``) or in full
(``"580.65.06"``, ``"575.57.08"``). A requirement is met when the actual version, cut to the
precision of the requirement, is not lower: ``580.65.06`` satisfies ``"580"`` and
``"580.65"``, ``575.57.08`` satisfies neither, and a bare branch ``"580"`` does not prove
``"580.65.06"`` (missing parts count as 0 in :func:`driver_meets`; :func:`driver_at_least`
says "unknown" instead). The checks compare in full: a requirement written as a bare
branch means the branch's first release that its CUDA family needs (:func:`full_minimum`:
"580" -> 580.65.06, CUDA 13.0's minimum; a 580.xx beta below it does not run CUDA 13). CUDA versions are ``"13"``, ``"13.0"``,
``"13.0.1"`` or NVML's integer (``13000`` -> ``"13.0"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DRIVER = re.compile(r"^\s*[Rr]?(\d{1,4})((?:\.\d{1,4}){0,2})\s*$", re.ASCII)
_CUDA = re.compile(r"^\s*(?:[Cc][Uu][Dd][Aa]\s*)?[Vv]?(\d{1,3})((?:\.\d{1,4}){0,2})\s*$", re.ASCII)

#: lowest Linux x86_64 driver that runs any CUDA toolkit of a major family (minor-version
#: compatibility). 13.0 GA states >= 580.65.06; 12.x states >= 525.60.13.
MIN_DRIVER_FOR_CUDA_MAJOR: dict[int, str] = {13: "580.65.06", 12: "525.60.13"}


class VersionError(ValueError):
    """A version string that cannot be read; the message quotes it and says what is expected."""


@dataclass(frozen=True, order=False)
class Version:
    """A dotted numeric version; ``text`` keeps the original spelling (``"580.65.06"``)."""

    parts: tuple[int, ...]
    text: str

    @property
    def major(self) -> int:
        """The first component: the driver branch (580) or the CUDA major (13)."""
        return self.parts[0]

    @property
    def minor(self) -> int:
        """The second component, 0 when absent."""
        return self.parts[1] if len(self.parts) > 1 else 0

    def padded(self, length: int) -> tuple[int, ...]:
        """The parts cut or padded with zeros to ``length``."""
        return (self.parts + (0,) * length)[:length]

    def at_least(self, minimum: "Version") -> bool:
        """True when this version, cut to ``minimum``'s precision, is >= ``minimum``."""
        n = len(minimum.parts)
        return self.padded(n) >= minimum.parts

    def __str__(self) -> str:
        return self.text


def parse_driver(text: object) -> Version:
    """Parse a driver version or branch: ``"580"``, ``"R580"``, ``"580.65.06"``."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not isinstance(text, str):
        raise VersionError(f"driver version {text!r} is not a string; expected e.g. '580' "
                           "or '580.65.06'")
    m = _DRIVER.match(text)
    if not m:
        raise VersionError(f"driver version {text!r} is not a version; expected a branch such "
                           "as '580' / 'R580' or a full version such as '580.65.06'")
    parts = (int(m.group(1)),) + tuple(int(p) for p in m.group(2).split(".")[1:])
    clean = m.group(1) + m.group(2)
    return Version(parts, clean)


def parse_cuda(text: object) -> Version:
    """Parse a CUDA version: ``"13"``, ``"13.0"``, ``"13.0.1"``, ``"cuda 13.0"``, or NVML's
    integer form (``13000`` -> 13.0, ``12090`` -> 12.9)."""
    if isinstance(text, bool):
        raise VersionError(f"CUDA version {text!r} is not a version")
    if isinstance(text, int):
        if text < 1000:
            raise VersionError(f"CUDA version {text!r}: NVML's integer form is major*1000 + "
                               "minor*10 (13000 = 13.0)")
        return cuda_from_int(text)
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not isinstance(text, str):
        raise VersionError(f"CUDA version {text!r} is not a string; expected e.g. '13.0'")
    m = _CUDA.match(text)
    if not m:
        raise VersionError(f"CUDA version {text!r} is not a version; expected e.g. '13', "
                           "'13.0' or '13.0.1'")
    parts = (int(m.group(1)),) + tuple(int(p) for p in m.group(2).split(".")[1:])
    return Version(parts, ".".join(str(p) for p in parts))


def cuda_from_int(value: int) -> Version:
    """NVML's ``nvmlSystemGetCudaDriverVersion_v2`` integer -> ``Version`` (13000 -> 13.0)."""
    major, minor = value // 1000, value % 1000 // 10
    return Version((major, minor), f"{major}.{minor}")


#: the lowest full driver of a branch that a CUDA family needs (580 -> 580.65.06): a bare
#: branch requirement means at least this release of it
BRANCH_FLOOR: dict[int, str] = {int(v.split(".")[0]): v for v in MIN_DRIVER_FOR_CUDA_MAJOR.values()}


def full_minimum(minimum: "Version") -> "Version":
    """A requirement as a full version: a bare branch whose first release for a CUDA family
    is known (:data:`BRANCH_FLOOR`: "580" -> "580.65.06", what CUDA 13.0 needs) becomes that
    release; anything else stays as written."""
    floor = BRANCH_FLOOR.get(minimum.major) if len(minimum.parts) == 1 else None
    return parse_driver(floor) if floor else minimum


def driver_at_least(actual: "Version", minimum: "Version") -> bool | None:
    """Is ``actual`` >= ``minimum``, compared in full? None when ``actual`` is written less
    precisely and agrees with ``minimum`` as far as it goes ("580" against "580.65.06":
    the branch alone cannot tell)."""
    n = len(minimum.parts)
    if len(actual.parts) >= n:
        return actual.padded(n) >= minimum.parts
    head = minimum.parts[:len(actual.parts)]
    return None if actual.parts == head else actual.parts > head


def driver_meets(actual: str, minimum: str) -> bool:
    """True when driver ``actual`` is at least ``minimum`` (both parsed; see module doc)."""
    return parse_driver(actual).at_least(parse_driver(minimum))


def driver_covers_cuda(driver_cuda: str | None, driver: str | None,
                       runtime: str) -> tuple[bool | None, str]:
    """Does the host driver support a CUDA ``runtime``? Returns (answer, how it was decided).

    Decided by the driver's own supported CUDA version (NVML) when known: it must be >= the
    runtime's major.minor. Otherwise by the driver version against the lowest driver of the
    runtime's major family (:data:`MIN_DRIVER_FOR_CUDA_MAJOR`). ``None`` when neither is known.
    """
    need = parse_cuda(runtime)
    if driver_cuda:
        have = parse_cuda(driver_cuda)
        ok = have.padded(2) >= need.padded(2)
        return ok, f"driver supports CUDA {have} (runtime needs {need.major}.{need.minor})"
    if driver:
        floor = MIN_DRIVER_FOR_CUDA_MAJOR.get(need.major)
        if floor is None:
            return None, f"no known minimum driver for CUDA {need.major}.x"
        known = driver_at_least(parse_driver(driver), parse_driver(floor))
        return known, f"driver {driver} vs minimum {floor} for CUDA {need.major}.x" + (
            " (only the branch is known)" if known is None else "")
    return None, "host driver unknown"
