"""``numeric`` and ``money`` as Debezium writes them, per ``decimal.handling.mode``.

``precise``: Kafka Connect's ``Decimal``, the base64 of the unscaled value's big-endian two's
complement (Java's ``BigInteger.toByteArray``), the scale in the schema; without a typmod,
Debezium's ``VariableScaleDecimal`` struct ``{"scale", "value"}`` (the scale without trailing
zeros); ``NaN`` and the infinities
are ``null``. ``string``: the decimal text, ``NaN`` as ``"NAN"`` (Debezium's special value
names). ``double``: a JSON number (a consumer parses ``1.23456789012E9`` and ``1234567890.12``
alike), ``NaN`` and the infinities as JSON strings.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any, Final

from connectors.postgres.types.scalars import Converter

__all__ = ["money_converter", "numeric_converter", "numeric_scale", "numeric_string"]

_STRING_SPECIALS: Final = {
    "NaN": "NAN",
    "Infinity": "POSITIVE_INFINITY",
    "-Infinity": "NEGATIVE_INFINITY",
}
_DOUBLE_SPECIALS: Final = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


def numeric_scale(typmod: int) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``numeric`` typmod; ``None`` without one (``numeric``)."""
    if typmod < 4:
        return None
    packed = typmod - 4
    scale = ((packed & 0x7FF) ^ 1024) - 1024  # PostgreSQL 15 allows a negative scale
    return (packed >> 16) & 0xFFFF, scale


def _integer(digits: str) -> int:
    """``int(digits)``, past Python's 4300-digit limit too (numeric allows 131072 digits):
    a Decimal is exact whatever its length, and so is its ``int``."""
    return int(digits) if len(digits) < 4000 else int(Decimal(digits))


def _unscaled(text: str, scale: int) -> int:
    """The integer ``text * 10**scale`` (``text`` a plain decimal with at most ``scale``
    fraction digits; more are cut, as none arrive for a column of that scale)."""
    whole, _, fraction = text.partition(".")
    if scale >= 0:
        return _integer(whole + fraction[:scale].ljust(scale, "0"))
    return _integer(whole) // int(
        10**-scale
    )  # a negative scale: the text is a multiple of 10**-scale


def _java_bytes(value: int) -> bytes:
    """``BigInteger.toByteArray()``: the shortest big-endian two's complement."""
    bits = value.bit_length() if value >= 0 else (-value - 1).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def _b64(value: int) -> str:
    return base64.b64encode(_java_bytes(value)).decode("ascii")


def numeric_string(text: str) -> str:
    """``numeric`` under ``string``: the text, ``NaN`` as ``"NAN"``."""
    return _STRING_SPECIALS.get(text, text)


def _double(text: str) -> float | str:
    special = _DOUBLE_SPECIALS.get(text)
    return special if special is not None else float(text)


def numeric_converter(mode: str, typmod: int) -> Converter:
    """The converter of a ``numeric`` column with this typmod."""
    if mode == "string":
        return numeric_string
    if mode == "double":
        return _double
    precision_scale = numeric_scale(typmod)
    if precision_scale is None:
        return _variable
    scale = precision_scale[1]

    def precise(text: str) -> str | None:
        if text in _STRING_SPECIALS:
            return None
        return _b64(_unscaled(text, scale))

    return precise


def _variable(text: str) -> dict[str, Any] | None:
    """``numeric`` without a typmod under ``precise``: Debezium's ``VariableScaleDecimal``.

    Its scale is the number's own without trailing zeros (``BigDecimal.stripTrailingZeros``,
    never below 0): ``12.3400`` is scale 2, ``2.5000000000000000`` (a quotient's display
    scale) scale 1, ``100`` scale 0, ``0.000`` scale 0.
    """
    if text in _STRING_SPECIALS:
        return None
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return {"scale": len(fraction), "value": _b64(_integer(whole + fraction))}


def _money_decimal(text: str) -> str:
    """The plain decimal of ``money`` text (``lc_monetary`` C: ``'-$1,234.56'``,
    ``'($1.00)'``)."""
    negative = text.startswith("-") or text.startswith("(")
    digits = "".join(c for c in text if c.isdigit() or c == ".")
    if not digits or digits.count(".") > 1:
        raise ValueError("not a money value")
    return ("-" if negative else "") + digits


def money_converter(mode: str) -> Converter:
    """``money``: as a ``numeric(.., 2)`` (Debezium's ``money.fraction.digits`` default)."""
    if mode == "string":
        return _money_decimal
    if mode == "double":
        return lambda text: float(_money_decimal(text))
    return lambda text: _b64(_unscaled(_money_decimal(text), 2))
