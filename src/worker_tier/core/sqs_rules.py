"""What SQS accepts in a message, checked before it is sent.

moto accepts much of what SQS refuses, so these rules are written from AWS's
documentation, and tests hold them against an independent strict stand-in
(``tests/support/strict_sqs.py``). Each ``*_problem`` function returns None when SQS
would accept the value, else one sentence naming the value and the rule, so the
caller decides what a refusal means: ``MessageError`` at send, a synth error for
``cron.yaml``, or an attribute named as dropped in a dead-letter reason.

Sources:

- body and String values: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
- attribute values: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_MessageAttributeValue.html
- names, data types and Number range:
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html
- group and deduplication ids: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
"""

from __future__ import annotations

import functools
import re
import string
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from worker_tier.core import limits
from worker_tier.core.limits import attribute_room

DATA_TYPES = ("String", "Number", "Binary")
MAX_DATA_TYPE_CHARS = 256
MAX_NUMBER_DIGITS = 38
MIN_NUMBER_EXPONENT = -128  # smallest magnitude 10^-128
MAX_NUMBER_EXPONENT = 126  # largest magnitude 10^126
# format_number writes plain decimals up to this exponent either way; past it a value is far outside SQS's range.
MAX_PLAIN_NUMBER_EXPONENT = 400
MAX_GROUP_ID_CHARS = 128
RESERVED_NAME_PREFIXES = ("aws.", "amazon.")

# Unicode characters SQS allows in a body or String value (XML 1.0's Char production).
_INVALID_CHARACTER = "[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_\-.]+")
_CUSTOM_TYPE_LABEL = re.compile(r"[A-Za-z0-9_\-.]+")
# SQS documents numbers as decimals; exponent notation is refused here so what passes is surely accepted.
_NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")  # ASCII digits only: \d matches any Unicode digit
_GROUP_ID_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)


@functools.lru_cache(maxsize=1)
def _invalid_character() -> re.Pattern[str]:
    """The compiled character rule; compiled on first use, as it costs ~10 ms at import."""
    return re.compile(_INVALID_CHARACTER)


def _shown(value: Any, limit: int = 60) -> str:
    """A value's repr, shortened for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The C0 controls SQS refuses (all but tab, newline and carriage return): in UTF-8 they are these bytes alone.
_REFUSED_CONTROL_BYTES = bytes(b for b in range(0x20) if b not in (0x09, 0x0A, 0x0D))
_OTHER_BYTES = bytes(b for b in range(256) if b not in _REFUSED_CONTROL_BYTES)
# Above this length a text is first screened at C speed (_clean), which a large body's regex scan costs 7 ns a character.
_SCREEN_FROM_CHARACTERS = 4096


def _clean(text: str) -> bool:
    """True when ``text`` surely holds no character SQS refuses, screened on its UTF-8 bytes at C speed: no lone
    surrogate (it cannot be encoded), no refused control byte, no U+FFFE or U+FFFF (EF BF BE, EF BF BF).
    False means "look closer", not "refused"."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not data.translate(None, _OTHER_BYTES) and b"\xef\xbf\xbe" not in data and b"\xef\xbf\xbf" not in data


def text_problem(text: str, what: str) -> str | None:
    """A character SQS refuses in a body or String value, with its offset; None if every character is allowed."""
    if len(text) >= _SCREEN_FROM_CHARACTERS and _clean(text):
        return None
    bad = _invalid_character().search(text)
    if bad is None:
        return None
    return (
        f"{what} has character {bad.group()!r} (U+{ord(bad.group()):04X}) at offset {bad.start()}, which SQS does not allow "
        "(allowed: tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF)"
    )


def body_problem(body: Any) -> str | None:
    """Why SQS would refuse ``body`` as a message body, or None.

    Examples
    --------
    >>> body_problem("hello") is None
    True
    >>> body_problem("")
    'body must not be empty (SQS requires at least one character)'
    """
    if not isinstance(body, str):
        return f"body must be a string, got {type(body).__name__}"
    if not body:
        return "body must not be empty (SQS requires at least one character)"
    return text_problem(body, "body")


def attribute_name_problem(name: Any) -> str | None:
    """Why SQS would refuse ``name`` as a message attribute name, or None.

    Examples
    --------
    >>> attribute_name_problem("tenant.id") is None
    True
    """
    if (
        isinstance(name, str)
        and 0 < len(name) <= limits.SQS_MAX_ATTRIBUTE_NAME_CHARS
        and _ATTRIBUTE_NAME.fullmatch(name)
        and not name.lower().startswith(RESERVED_NAME_PREFIXES)
        and not name.startswith(".")
        and not name.endswith(".")
        and ".." not in name
    ):
        return None
    return (
        f"attribute name {_shown(name)} is not allowed: SQS takes 1 to {limits.SQS_MAX_ATTRIBUTE_NAME_CHARS} of "
        "A-Z a-z 0-9 _ - ., no leading, trailing or double period, and no 'AWS.' or 'Amazon.' prefix"
    )


def data_type_problem(name: str, data_type: Any) -> str | None:
    """Why SQS would refuse an attribute's DataType (String, Number or Binary, optionally '.label'), or None."""
    if isinstance(data_type, str) and len(data_type) <= MAX_DATA_TYPE_CHARS:
        base, dot, label = data_type.partition(".")
        if base in DATA_TYPES and (not dot or _CUSTOM_TYPE_LABEL.fullmatch(label)):
            return None
    return (
        f"attribute {name!r} has data type {_shown(data_type)}; SQS takes String, Number or Binary, optionally "
        f"followed by '.label' (A-Z a-z 0-9 _ - .), at most {MAX_DATA_TYPE_CHARS} characters"
    )


def number_problem(name: str, text: Any) -> str | None:
    """Why SQS would refuse ``text`` as a Number value, or None.

    Examples
    --------
    >>> number_problem("n", "12.50") is None
    True
    >>> number_problem("n", "1" + "0" * 130) is not None
    True
    """
    rule = (
        f"SQS Numbers are decimals (no exponent) of up to {MAX_NUMBER_DIGITS} significant digits, "
        f"zero or between 10^{MIN_NUMBER_EXPONENT} and 10^{MAX_NUMBER_EXPONENT} in magnitude"
    )
    if not isinstance(text, str) or not _NUMBER.fullmatch(text):
        return f"attribute {name!r} has Number value {_shown(text)}; {rule}"
    try:
        value = Decimal(text)
    except InvalidOperation:  # unreachable given the pattern, kept so a bad value can never raise
        return f"attribute {name!r} has Number value {_shown(text)}; {rule}"
    if value == 0:
        return None
    # Significant digits without Decimal's context rounding (28 digits): leading and trailing zeros trimmed.
    digits = "".join(map(str, value.as_tuple().digits)).strip("0")
    magnitude = abs(value)
    if len(digits) > MAX_NUMBER_DIGITS or not (
        Decimal(10) ** MIN_NUMBER_EXPONENT <= magnitude <= Decimal(10) ** MAX_NUMBER_EXPONENT
    ):
        return f"attribute {name!r} has Number value {_shown(text)}; {rule}"
    return None


def format_number(value: int | float | Decimal) -> str:
    """A Python number as SQS Number text: plain decimal, never exponent notation.

    A float's shortest repr is used (``float.__repr__``, so a float subclass such
    as numpy's ``float64`` formats as a float); a Decimal keeps its digits. A
    value far outside SQS's range keeps Decimal's short text, which
    ``number_problem`` refuses, rather than a huge string (an int past 4,300
    digits cannot even be printed by ``str``).

    Examples
    --------
    >>> format_number(1e-05), format_number(12), format_number(2.5), format_number(Decimal("1.50"))
    ('0.00001', '12', '2.5', '1.50')
    """
    if isinstance(value, int):
        return str(Decimal(value))  # Decimal prints any int; str(int) refuses past 4,300 digits
    number = value if isinstance(value, Decimal) else Decimal(float.__repr__(float(value)))
    if not number.is_finite() or abs(number.adjusted()) > MAX_PLAIN_NUMBER_EXPONENT:
        return str(number)
    text = format(number, "f")
    if isinstance(value, Decimal) or "." not in text:
        return text
    return text.rstrip("0").rstrip(".")


def attribute_value_problem(name: str, value: Any) -> str | None:
    """Why SQS would refuse one attribute value in the SQS API shape, or None.

    Examples
    --------
    >>> attribute_value_problem("n", {"DataType": "Number", "StringValue": "7"}) is None
    True
    >>> attribute_value_problem("s", {"DataType": "String", "StringValue": ""}) is None
    False
    """
    if not isinstance(value, Mapping):
        return f"attribute {name!r} must be a mapping with DataType and StringValue or BinaryValue, got {_shown(value)}"
    data_type: Any = value.get("DataType")  # a str once data_type_problem finds none
    problem = data_type_problem(name, data_type)
    if problem:
        return problem
    base = data_type.partition(".")[0]
    if base == "Binary":
        return _binary_problem(name, value)
    text = value.get("StringValue")
    if value.get("BinaryValue") is not None or not isinstance(text, str) or not text:
        return f"attribute {name!r} of type {base} needs a non-empty StringValue (and no BinaryValue), got {_shown(dict(value))}"
    if base == "Number":
        return number_problem(name, text)
    return text_problem(text, f"attribute {name!r} value")


def _binary_problem(name: str, value: Mapping[str, Any]) -> str | None:
    """Why SQS would refuse a Binary value (non-empty bytes, no StringValue), or None."""
    data = value.get("BinaryValue")
    if value.get("StringValue") is not None or not isinstance(data, (bytes, bytearray)) or not data:
        return f"attribute {name!r} of type Binary needs non-empty bytes in BinaryValue (and no StringValue), got {_shown(dict(value))}"
    return None


def attributes_problem(attributes: Mapping[str, Any]) -> str | None:
    """The first reason SQS would refuse a message's attributes (count, names, values), or None."""
    if attribute_room(len(attributes)) < 0:
        return f"{len(attributes)} attributes; SQS allows at most {limits.SQS_MAX_MESSAGE_ATTRIBUTES} per message"
    for name, value in attributes.items():
        problem = attribute_name_problem(name) or attribute_value_problem(name, value)
        if problem:
            return problem
    return None


def group_id_problem(value: Any, field: str = "MessageGroupId") -> str | None:
    """Why SQS would refuse a MessageGroupId (or, with ``field``, a MessageDeduplicationId), or None.

    Examples
    --------
    >>> group_id_problem("tenant-42") is None
    True
    >>> group_id_problem("nightly report")
    "MessageGroupId 'nightly report' is not allowed: SQS takes 1 to 128 ASCII letters, digits and punctuation (no spaces)"
    """
    if isinstance(value, str) and 0 < len(value) <= MAX_GROUP_ID_CHARS and set(value) <= _GROUP_ID_CHARACTERS:
        return None
    return (
        f"{field} {_shown(value)} is not allowed: SQS takes 1 to {MAX_GROUP_ID_CHARS} ASCII letters, digits "
        "and punctuation (no spaces)"
    )


def delay_seconds_problem(value: Any) -> str | None:
    """Why SQS would refuse a DelaySeconds value (a whole number 0..900), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limits.SQS_MAX_DELAY_SECONDS:
        return None
    return f"DelaySeconds {_shown(value)} is not allowed: SQS takes a whole number of seconds 0..{limits.SQS_MAX_DELAY_SECONDS}"
