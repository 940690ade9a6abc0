"""Sizes and durations as headroom writes them ("2GiB", "512 MiB", "60s"), to exact integers,
and bytes back to text for people."""

import re

_UNITS = {
    "": 1, "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_bytes(text):
    """"2GiB" → 2147483648; an int is taken as bytes. ValueError names the text."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 2GiB, 512MiB, 1073741824)")
    number, unit = m.group(1), _UNITS[m.group(2).lower()]
    if "." in number:
        whole, frac = number.split(".")
        return int(whole) * unit + int(frac) * unit // 10 ** len(frac)
    return int(number) * unit


def parse_duration_s(text):
    """"60s" → 60.0, "500ms" → 0.5; a bare number is seconds. ValueError names the text."""
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(text))
    if not m or (m.group(2) or "s") not in _SECONDS:
        raise ValueError(f"{text!r} is not a duration (e.g. 60s, 500ms, 2min)")
    return float(m.group(1)) * _SECONDS[m.group(2) or "s"]


def format_bytes(n):
    """1610612736 → "1.50 GiB", as headroom prints sizes for people."""
    if n is None:
        return "-"
    sign, n = ("-", -n) if n < 0 else ("", n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{n} B"
