"""Input classes for differential checks: one Hypothesis strategy per kind of input a ticket
takes, shared by every task (in a check's namespace as `inputs`).

Each strategy covers the whole valid domain of its class, the corners included, because the
implementations that slip through review are wrong on exactly those: unicode beyond Latin-1,
line breaks inside quoted fields, IPv6, bytes that are not UTF-8, amounts too large or too
small for a float, empty input. The ordinary cases come first in each `one_of` so that
Hypothesis's shrinking (towards the first branch) reports the plainest failing input.
"""
from __future__ import annotations

import functools
import ipaddress
import string
from decimal import Decimal
from typing import Literal

from hypothesis import strategies as st

# Characters that break naive code, each for its own reason: quotes, separators, markup,
# escapes, line breaks of every kind (\u2028 included), NUL, right-to-left marks, combining
# accents, a character outside the BMP, and one whose case folding changes its length.
AWKWARD = "\"',;:<>&/\\%#?=+ \t\r\n\x00\x1b\u2028\u200f\u0301\U0001f600\u00df\u0130\ufeff"
# Lone surrogates, which no UTF-8 input can hold (typed: hypothesis takes category names only).
_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)


def shared(build):
    """One strategy per set of arguments, built once per process. A check's `@st.composite`
    calls these inside its draw function, once per example: a strategy built anew is
    validated and labelled by Hypothesis again on every draw (a third to half of a
    differential's CPU). A strategy is immutable and its draws depend on its structure alone,
    so the shared one draws exactly what a fresh one would."""
    cached = functools.lru_cache(maxsize=None)(build)

    @functools.wraps(build)
    def strategy(*args, **kwargs):
        try:
            return cached(*args, **kwargs)
        except TypeError:  # an unhashable argument: built anew, as before
            return build(*args, **kwargs)

    return strategy


@shared
def text(min_size: int = 0, max_size: int = 40, line_breaks: bool = True) -> st.SearchStrategy[str]:
    """Any text a user can type or paste: ASCII, the awkward characters above, and all of
    unicode but lone surrogates (which no UTF-8 input can hold)."""
    alphabet = st.one_of(
        st.sampled_from(string.ascii_letters + string.digits + " "),
        st.sampled_from(AWKWARD if line_breaks else AWKWARD.replace("\r", "").replace("\n", "").replace("\u2028", "")),
        st.characters(blacklist_categories=_SURROGATES,
                      blacklist_characters="" if line_breaks else "\r\n\u2028\u2029\x0b\x0c\x1c\x1d\x1e\x85"),
    )
    return st.text(alphabet, min_size=min_size, max_size=max_size)


@shared
def line(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Text on one line (no line break of any kind)."""
    return text(min_size, max_size, line_breaks=False)


@shared
def word(min_size: int = 1, max_size: int = 12) -> st.SearchStrategy[str]:
    """One word: letters of any script, digits, no space or punctuation."""
    return st.text(st.characters(whitelist_categories=("Lu", "Ll", "Lo", "Nd")), min_size=min_size, max_size=max_size)


@shared
def binary(min_size: int = 0, max_size: int = 64) -> st.SearchStrategy[bytes]:
    """Bytes, UTF-8 or not: valid text, NUL, invalid sequences, a BOM."""
    return st.one_of(
        st.binary(min_size=min_size, max_size=max_size),
        text(max_size=max_size // 2).map(lambda s: s.encode("utf-8")).filter(lambda b: min_size <= len(b) <= max_size),
        st.sampled_from([b"\xff\xfe", b"\xef\xbb\xbfhello", b"\x00\x00", b"caf\xe9", b"\xc3("]).filter(
            lambda b: min_size <= len(b) <= max_size),
    )


@shared
def ip_address() -> st.SearchStrategy[str]:
    """A client address as a server sees it: IPv4, IPv6 in its compressed form, IPv4-mapped
    IPv6, loopback and the private ranges."""
    return st.one_of(
        st.ip_addresses(v=4).map(str),
        st.ip_addresses(v=6).map(str),
        st.ip_addresses(v=4).map(lambda a: str(ipaddress.IPv6Address(f"::ffff:{a}"))),
        st.sampled_from(["127.0.0.1", "::1", "10.0.0.1", "192.168.1.20", "2001:db8::1", "fe80::1"]),
    )


@shared
def integer(bits: int = 80) -> st.SearchStrategy[int]:
    """Integers, small ones and ones beyond 64 bits."""
    return st.one_of(st.integers(-1000, 1000), st.integers(-(2 ** bits), 2 ** bits))


@shared
def decimal_amount(places: int = 2, max_digits: int = 30) -> st.SearchStrategy[Decimal]:
    """A money amount with `places` decimals: zero, cents, and amounts whose sum no float
    holds exactly (up to `max_digits` digits)."""
    quantum = Decimal(1).scaleb(-places)
    limit = Decimal(10) ** (max_digits - places) - 1
    return st.one_of(
        st.integers(0, 100_000).map(lambda cents: Decimal(cents) * quantum),
        st.decimals(min_value=-limit, max_value=limit, places=places, allow_nan=False, allow_infinity=False),
    )


@shared
def number_text(places: int = 2) -> st.SearchStrategy[str]:
    """Amounts as they are written in files: '12', '12.50', '-3.1', '0.00', '1e3' is not one."""
    return decimal_amount(places).map(lambda d: format(d, "f"))


@shared
def file_name() -> st.SearchStrategy[str]:
    """A plain file name a user picks: unicode, spaces, several dots, a leading dot or dash;
    never a path separator, '.' or '..'."""
    part = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\x00"),
                   min_size=1, max_size=20)
    return st.one_of(
        st.tuples(st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=12),
                  st.sampled_from(["txt", "pdf", "png", "tar.gz", "csv"])).map(lambda t: f"{t[0]}.{t[1]}"),
        part,
    ).filter(lambda name: name not in (".", "..") and name.strip() == name and name)


@shared
def email_address() -> st.SearchStrategy[str]:
    """A valid address (RFC 5321 dot-atoms), plus a few of the shapes real users have."""
    return st.one_of(st.emails(), st.sampled_from([
        "jo@example.org", "first.last+tag@example.co.uk", "o'brien@example.ie", "x@sub.example.com"]))


@shared
def csv_field() -> st.SearchStrategy[str]:
    """A CSV field's value: commas, quotes and line breaks in it (written quoted by csv)."""
    return st.one_of(st.sampled_from(["", "a,b", 'say "hi"', "two\nlines", "cr\r\nlf", " padded "]), text(max_size=20))


@shared
def url() -> st.SearchStrategy[str]:
    """An absolute http(s) URL with a path, query and fragment, unicode in the path."""
    segment = st.text(string.ascii_letters + string.digits + "-._~%", min_size=0, max_size=12)
    return st.builds(
        lambda scheme, host, path, query, fragment: f"{scheme}://{host}/{'/'.join(path)}{query}{fragment}",
        st.sampled_from(["http", "https"]),
        st.sampled_from(["example.org", "sub.example.com", "example.org:8080", "xn--bcher-kva.example"]),
        st.lists(st.one_of(segment, st.sampled_from(["über", "a b", "%E2%82%AC"])), max_size=3),
        st.sampled_from(["", "?q=1", "?a=1&b=two", "?redirect=https://example.net/"]),
        st.sampled_from(["", "#top", "#a/b"]),
    )


@shared
def html_text() -> st.SearchStrategy[str]:
    """Text a user types into a form that ends up in a page: markup-like pieces, entities."""
    return st.one_of(text(max_size=30), st.lists(st.sampled_from(
        ["<b>", "</p>", "&amp;", "&lt;", "\"", "'", "`", "javascript:", "<!--", "-->", "]]>", "x"]), max_size=6).map("".join))


@shared
def search_term() -> st.SearchStrategy[str]:
    """A term typed into a search box: words of any script, with case and accents."""
    return st.one_of(word(), st.sampled_from(["Straße", "STRASSE", "café", "cafe\u0301", "İstanbul", "naïve"]))


NAMES = ("text", "line", "word", "binary", "ip_address", "integer", "decimal_amount", "number_text",
         "file_name", "email_address", "csv_field", "url", "html_text", "search_term")
