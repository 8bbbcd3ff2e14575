"""Facts files (written by ``k3accept collect``): read, validate, write.

A malformed file raises :class:`FactsFileError` naming the file and the field (and for broken
JSON, the line and column), never a bare traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from .facts import FORMAT, GpuFacts, NodeFacts
from .versions import VersionError, parse_cuda, parse_driver


class FactsFileError(ValueError):
    """A facts file that cannot be used; ``path`` and ``field`` say where."""

    def __init__(self, path: str, field: str, problem: str,
                 hint: str = "write it with 'k3accept collect --out FILE' on the GPU node",
                 ) -> None:
        where = f"field '{field}'" if field else "the file"
        super().__init__(f"facts file {path}: {where}: {problem} ({hint})")
        self.path = path
        self.field = field


def _opt_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string or null, got {_show(value)}")


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"expected a whole number >= 0 or null, got {_show(value)}")
    return value


def _opt_time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or value < 0:
        raise TypeError(f"expected a Unix time in seconds or null, got {_show(value)}")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_show(value)}")
    return value


def _driver(value: Any) -> str | None:
    value = _opt_str(value)
    return None if value is None else parse_driver(value).text


def _cuda(value: Any) -> str | None:
    value = _opt_str(value)
    return None if value is None else parse_cuda(value).text


def _show(value: Any) -> str:
    text = json.dumps(value)[:60]
    return f"{type(value).__name__} {text}"


_NODE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "node": _opt_str, "source": _opt_str, "gpu_available": _bool, "gpu_error": _opt_str,
    "driver_version": _driver, "cuda_driver_version": _cuda, "image": _opt_str,
    "cuda_runtime": _cuda, "cuda_runtime_source": _opt_str, "torch_version": _opt_str,
    "torch_cuda": _opt_str, "topology": _opt_str, "collected_at": _opt_time,
}
_GPU_FIELDS: dict[str, Callable[[Any], Any]] = {
    "index": _opt_int, "name": _opt_str, "uuid": _opt_str, "memory_total_bytes": _opt_int,
    "memory_used_bytes": _opt_int, "nvlink_active": _opt_int,
}


def from_dict(data: Any, path: str = "<facts>") -> NodeFacts:
    """Validate a decoded facts document and build :class:`NodeFacts`."""
    if not isinstance(data, dict):
        raise FactsFileError(path, "", f"expected a JSON object, got {_show(data)}")
    fmt = data.get("k3accept_facts")
    if fmt != FORMAT:
        raise FactsFileError(path, "k3accept_facts", f"expected {FORMAT} (format marker), got "
                             f"{_show(fmt)}; is this a 'k3accept collect' file?")
    values: dict[str, Any] = {}
    for name, check in _NODE_FIELDS.items():
        try:
            values[name] = check(data.get(name))
        except (TypeError, VersionError) as exc:
            raise FactsFileError(path, name, str(exc)) from None
    values["source"] = f"file:{path}"
    values["rdma_devices"] = _rdma(data.get("rdma_devices"), path)
    values["gpus"] = _gpus(data.get("gpus", []), path)
    if values["gpu_available"] and not values["gpus"]:
        raise FactsFileError(path, "gpus", "gpu_available is true but no GPU is listed")
    return NodeFacts(**values)


def _rdma(value: Any, path: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FactsFileError(path, "rdma_devices", f"expected a list of device names or null, "
                             f"got {_show(value)}")
    return tuple(value)


def _gpus(value: Any, path: str) -> tuple[GpuFacts, ...]:
    if not isinstance(value, list):
        raise FactsFileError(path, "gpus", f"expected a list, got {_show(value)}")
    out: list[GpuFacts] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise FactsFileError(path, f"gpus[{i}]", f"expected an object, got {_show(item)}")
        g: dict[str, Any] = {}
        for name, check in _GPU_FIELDS.items():
            try:
                g[name] = check(item.get(name))
            except TypeError as exc:
                raise FactsFileError(path, f"gpus[{i}].{name}", str(exc)) from None
        if g["index"] is None:
            raise FactsFileError(path, f"gpus[{i}].index", "missing: every GPU needs its index")
        out.append(GpuFacts(**g))
    indexes = [g.index for g in out]
    if len(set(indexes)) != len(indexes):
        raise FactsFileError(path, "gpus", f"duplicate GPU index in {indexes}")
    return tuple(out)


def _json(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FactsFileError(path, "", f"not JSON: {exc.msg} at line {exc.lineno} column "
                             f"{exc.colno}") from None


def loads(text: str, path: str = "<facts>") -> NodeFacts:
    """Parse facts-file text."""
    return from_dict(_json(text, path), path)


def read_json(path: str | Path) -> Any:
    """The JSON document in ``path`` (a facts file, or ``kubectl get nodes -o json``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FactsFileError(str(p), "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FactsFileError(str(p), "", f"cannot be read: {exc}") from None
    return _json(text, str(p))


def load(path: str | Path) -> NodeFacts:
    """Read and validate one facts file."""
    return from_dict(read_json(path), str(path))


def dumps(facts: NodeFacts) -> str:
    """Facts-file text (indented JSON, trailing newline)."""
    return json.dumps(facts.to_dict(), indent=2, sort_keys=False) + "\n"
