"""Fixed-format serializers for primitives, with vectorized bulk paths for snapshots.

``Int64Serializer`` is order-preserving (big-endian with the sign bit flipped), so byte order
equals numeric order in range scans. The numeric serializers reject ``bool`` although Python
treats it as an int: ``True`` would silently come back as ``1``.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Sequence

import numpy as np

from statekit.spi.errors import SerializationError
from statekit.spi.serializer import TypeSerializer

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: the serializers load no pyarrow until a snapshot

_I64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_SIGN = 1 << 63
#: list cells of up to this many fixed-width values are read by one ``Struct`` call
_LIST_READ_AT_ONCE = 64


def _list_readers(code: str) -> dict[int, struct.Struct]:
    """By cell length: a ``Struct`` that reads every 8-byte value (format ``code``) of a list cell of
    up to ``_LIST_READ_AT_ONCE`` values, each after its one length byte (``deserialize_strided``
    from 1 at a step of 9), in one call instead of one ``unpack_from`` each."""
    return {9 * n: struct.Struct(">" + ("x" + code) * n) for n in range(1, _LIST_READ_AT_ONCE + 1)}


_I64_LISTS = _list_readers("Q")
_F64_LISTS = _list_readers("d")


#: what ``Int64Serializer`` takes
_INT64_RANGE = f"it takes 64-bit integers, from {-_SIGN} to {_SIGN - 1}"


def _bad(kind: str, value: Any, exc: Exception) -> SerializationError:
    return SerializationError(f"{kind} cannot encode {value!r} ({type(value).__name__}): {exc}")


def _integer(value: Any) -> Any:
    """What ``Int64Serializer`` packs for a value that is no ``int``: a NumPy integer as the int it
    holds (NumPy arithmetic would overflow or wrap around), ``bool`` rejected, anything else as it is
    (an ``int`` subclass packs; the others fail to)."""
    if isinstance(value, np.integer):
        return int(value)
    if value.__class__ is bool:
        _reject_bool("Int64Serializer", value)
    return value


def _wrong_width(kind: str, data: bytes) -> SerializationError:
    return SerializationError(f"{kind} expects 8 bytes, got {len(data)}")


def _reject_bool(kind: str, value: bool) -> NoReturn:
    raise SerializationError(
        f"{kind} cannot encode {value!r} (bool): it would be restored as {int(value)}. Store int({value!r}) "
        f"if a number is meant, or give the state a serializer that keeps booleans (PickleSerializer, "
        f"MsgpackSerializer)")


class Int64Serializer(TypeSerializer[int]):
    FIXED_SIZE = 8
    BYTE_EQUALITY_TYPES = frozenset({int})

    def serialize(self, value: int) -> bytes:
        number = value if value.__class__ is int else _integer(value)
        try:
            return _I64.pack(number + _SIGN)  # ">Q" rejects anything outside the signed 64-bit range
        except (struct.error, TypeError) as exc:
            raise _bad("Int64Serializer", value, TypeError(_INT64_RANGE)) from exc

    def deserialize(self, data: bytes) -> int:
        try:
            return _I64.unpack(data)[0] - _SIGN
        except struct.error:  # not 8 bytes
            raise _wrong_width("Int64Serializer", data) from None

    def deserialize_many(self, datas: Iterable[bytes]) -> list[int]:
        unpack = _I64.unpack
        try:
            return [unpack(data)[0] - _SIGN for data in datas]
        except struct.error:
            raise SerializationError("Int64Serializer expects 8 bytes per value, got a value of another length") \
                from None

    def deserialize_strided(self, data: bytes, start: int, step: int) -> list[int]:
        if start == 1 and step == 9:
            reader = _I64_LISTS.get(len(data))
            if reader is not None:
                return [v - _SIGN for v in reader.unpack(data)]
        unpack_from = _I64.unpack_from
        return [unpack_from(data, p)[0] - _SIGN for p in range(start, len(data), step)]

    def serialize_many(self, values: Iterable[int]) -> list[bytes]:
        pack = _I64.pack
        values = values if isinstance(values, (list, tuple)) else list(values)
        try:
            return [pack((v if v.__class__ is int else _integer(v)) + _SIGN) for v in values]
        except (struct.error, TypeError):
            return super().serialize_many(values)  # names the value that is no 64-bit integer


    def serialize_arrow(self, values: Sequence[int]) -> pa.Array:
        import pyarrow as pa

        numbers = _inferred(values, pa.int64())
        if numbers is None:
            return super().serialize_arrow(values)  # names the value that is no 64-bit integer
        data = (numbers.to_numpy().view(np.uint64) ^ np.uint64(_SIGN)).astype(">u8")
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(values), [None, pa.py_buffer(data)])
        return fixed.cast(pa.binary())


class Float64Serializer(TypeSerializer[float]):
    FIXED_SIZE = 8  # no BYTE_EQUALITY_TYPES: 0.0 == -0.0 and NaN != NaN, though their bytes say otherwise

    def serialize(self, value: float) -> bytes:
        if value.__class__ is bool:
            _reject_bool("Float64Serializer", value)  # type: ignore[arg-type]
        try:
            return _F64.pack(value)
        except (struct.error, TypeError) as exc:
            raise _bad("Float64Serializer", value, exc) from exc

    def deserialize(self, data: bytes) -> float:
        try:
            return _F64.unpack(data)[0]
        except struct.error:  # not 8 bytes
            raise _wrong_width("Float64Serializer", data) from None

    def deserialize_strided(self, data: bytes, start: int, step: int) -> list[float]:
        if start == 1 and step == 9:
            reader = _F64_LISTS.get(len(data))
            if reader is not None:
                return list(reader.unpack(data))
        unpack_from = _F64.unpack_from
        return [unpack_from(data, p)[0] for p in range(start, len(data), step)]


class StringSerializer(TypeSerializer[str]):
    """UTF-8 text."""

    BYTE_EQUALITY_TYPES = frozenset({str})

    def serialize(self, value: str) -> bytes:
        try:
            return str.encode(value)  # UTF-8; a str subclass's own ``encode`` is not consulted
        except (TypeError, UnicodeEncodeError) as exc:
            raise _bad("StringSerializer", value, exc) from exc

    def unchecked_serializer(self) -> Callable[[str], bytes]:
        return str.encode  # ``serialize`` without its error translation

    def serialize_many(self, values: Iterable[str]) -> list[bytes]:
        values = values if isinstance(values, (list, tuple)) else list(values)
        try:
            return list(map(str.encode, values))
        except (TypeError, UnicodeEncodeError):
            return super().serialize_many(values)  # names the value that does not encode

    def deserialize(self, data: bytes) -> str:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"StringSerializer cannot decode {len(data)} bytes as UTF-8: {exc}") from None

    def serialize_arrow(self, values: Sequence[str]) -> pa.Array:
        import pyarrow as pa

        # typed, not inferred: Arrow's inference of str takes microseconds per value where pandas is
        # not imported (``benchmarks/checkpointing.py``), and a typed string array takes bytes too
        if _all_of_type(values, str):
            try:
                return pa.array(values, pa.string()).view(pa.binary())
            except (pa.ArrowException, UnicodeEncodeError):
                pass
        # anything else (a lone surrogate, a value no str) is named by ``serialize``
        return super().serialize_arrow(values)


class BytesSerializer(TypeSerializer[bytes]):
    """Raw bytes, unchanged."""

    BYTE_EQUALITY_TYPES = frozenset({bytes})

    def serialize(self, value: bytes) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _bad("BytesSerializer", value, TypeError("expected bytes"))
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return bytes(data)

    def serialize_arrow(self, values: Sequence[bytes]) -> pa.Array:
        import pyarrow as pa

        return pa.array(values, pa.binary()) if _all_of_type(values, bytes) else super().serialize_arrow(values)


def _all_of_type(values: Sequence[Any], kind: type) -> bool:
    """Every value is exactly of ``kind`` (Arrow's conversion to binary takes str too)."""
    return set(map(type, values)) <= {kind}


def _inferred(values: Sequence[Any], kind: pa.DataType) -> pa.Array | None:
    import pyarrow as pa

    """``values`` as the Arrow array whose type Arrow infers, if that is ``kind`` with no nulls (so
    every value is of the matching Python type: Arrow infers no other for them); else None."""
    try:
        array = pa.array(values)
    except (pa.ArrowException, OverflowError, UnicodeEncodeError):
        return None
    return array if array.type == kind and not array.null_count else None
