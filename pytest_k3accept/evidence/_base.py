"""What every typed evidence kind shares: the field type check and the lenient reader.

:func:`_check` raises :class:`TypeError` naming the first field whose value has the wrong
type (called from each kind's ``__post_init__``); :func:`_known` keeps the keys of a mapping
that are fields of a kind (a record read back, a team's evidence with extra keys).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping


def _check(obj: Any) -> None:
    """Raise TypeError naming the first field whose value has the wrong type."""
    name = type(obj).__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        want = _TYPES.get(str(f.type).replace(" ", ""))
        if want is None:
            continue
        if value is None and "None" in str(f.type):
            continue
        if isinstance(value, bool) and bool not in want:
            raise TypeError(f"{name}.{f.name}: expected {f.type}, got {value!r}")
        if not isinstance(value, want):
            raise TypeError(f"{name}.{f.name}: expected {f.type}, got {type(value).__name__} "
                            f"{value!r}")


_NUM = (int, float)
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": _NUM, "bool": (bool,),
    "int|None": (int,), "float|None": _NUM, "bool|None": (bool,), "str|None": (str,),
    "dict[str,int]": (dict,), "dict[str,Any]": (dict,), "tuple[str,...]": (tuple,),
    "tuple[dict[str,Any],...]": (tuple,), "dict[str,Any]|None": (dict,),
}


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _tuple_of_str(value: Any) -> Any:
    """A list of lines read back as a tuple of strings (anything else is returned as it is,
    for :func:`_check` to name)."""
    if isinstance(value, (list, tuple)):
        return tuple(str(x) for x in value)
    return value


def _tuple_of_dicts(value: Any) -> Any:
    """A list of mappings read back as a tuple of plain dicts (non-mappings dropped)."""
    if isinstance(value, (list, tuple)):
        return tuple(dict(x) for x in value if isinstance(x, Mapping))
    return value


def _read(cls: type, data: Mapping[str, Any], *, strs: tuple[str, ...] = (),
          dicts: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``cls`` found in ``data``, with its list fields made tuples."""
    known = _known(cls, data)
    for name in strs:
        if name in known:
            known[name] = _tuple_of_str(known[name])
    for name in dicts:
        if name in known:
            known[name] = _tuple_of_dicts(known[name])
    return known


class Kind:
    """The base of every typed evidence kind (each a frozen dataclass of its own):

    * construction checks each field's type (:func:`_check`): a wrong shape is a TypeError
      naming the field, at the call site;
    * :meth:`to_data` is the plain view the record keeps (tuples as lists);
    * :meth:`from_data` is the one reader of the kind's plain forms (unknown keys ignored,
      the list fields named in ``STRS`` / ``DICTS`` made tuples); a kind that reads older
      shapes too overrides it.
    """

    KIND: ClassVar[str] = ""
    #: list fields read back as tuples of strings / of plain dicts
    STRS: ClassVar[tuple[str, ...]] = ()
    DICTS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        _check(self)

    def to_data(self) -> dict[str, Any]:
        """Plain values (JSON-serializable)."""
        out = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Any:
        """Read back :meth:`to_data` (or a producer's ``as_dict``)."""
        return cls(**_read(cls, data, strs=cls.STRS, dicts=cls.DICTS))
