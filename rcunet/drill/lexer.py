"""Tokens of the packetdrill language, as google/packetdrill's ``lexer.l`` makes them.

flex picks the longest match and, among equally long ones, the rule listed first; the
keyword rules come before the generic word rule, so ``ack`` is ACK but ``acked`` a WORD.
This lexer does the same with one combined pass per token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rcunet.drill.errors import DrillError

#: Words that are tokens of their own in lexer.l (the rest are WORD).
KEYWORDS = frozenset("""
sa_family sin_port sin_addr msg_name msg_iov msg_flags msg_control cmsg_data cmsg_level
cmsg_type ee_errno ee_origin ee_type ee_code ee_info ee_data scm_sec scm_nsec fd u32 u64
ptr events revents onoff linger htons ipv4 ipv6 icmp udp GREv0 gre raw sum off key seq
none checksum present encap psp spi mpls label tc ttl inet_addr inet6_addr ack eol ecr mss
mtu nop sack sackOK md5 TS FO FOEXP ECN e0b e1b ceb tos flowlabel flags Flags val win urg
wscale ect01 ect0 ect1 noecn ce id
""".split())

#: Largest script the engine reads (packetdrill's own scripts are a few KB).
MAX_SCRIPT_BYTES = 4 * 1024 * 1024

_SEG = r"[0-9a-fA-F]{1,4}"
_IPV4 = r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+"
# lexer.l's v0..v12 folded: an address with "::", or eight groups, or an embedded IPv4.
_IPV6 = (rf"(?:(?:{_SEG}:){{7}}{_SEG}"
         rf"|(?:{_SEG}:){{1,4}}:{_IPV4}|::ffff:(?:0{{1,4}}:)?{_IPV4}"
         rf"|(?:{_SEG}(?::{_SEG}){{0,6}})?::(?:{_SEG}(?::{_SEG}){{0,6}})?)")

# (kind, pattern) in lexer.l's order: ties go to the earlier rule.
_RULES: list[tuple[str, re.Pattern[str]]] = [(k, re.compile(p)) for k, p in (
    ("ELLIPSIS", r"\.\.\."),
    ("OPTION", r"--[a-zA-Z0-9_]+"),
    ("FLOAT", r"-?[0-9]*\.[0-9]+"),
    ("INTEGER", r"-?[0-9]+"),
    ("HEX_INTEGER", r"0x[0-9a-fA-F]+"),
    ("WORD", r"[a-zA-Z0-9_]+"),
    ("STRING", r'"(?:\\[\s\S]|[^"\\])*"'),
    ("BACK_QUOTED", r"`(?:\\[\s\S]|[^`\\])*`"),
    ("CODE", r"%\{(?:[^}]|\}(?!%))*\}%"),
    ("IPV4_ADDR", _IPV4),
    ("IPV6_ADDR", _IPV6),
)]
_SKIP = re.compile(r"[ \t\r\n\f\v]+|//[^\n]*(?:\n|$)|/\*(?:[^*]|\*(?!/))*\*/")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "`": "`"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  #: a rule name above, a keyword (upper-cased), or the character itself
    text: str
    line: int
    value: object = None  #: the number for INTEGER/FLOAT/HEX_INTEGER, the text of a string

    def __str__(self) -> str:
        return self.text


def _unquote(text: str) -> str:
    r"""The string's characters, with C's escapes as packetdrill's parser decodes them
    (unescape_cstring_expression): ``\xHH``, octal ``\NNN`` and the single letters."""
    body = text[1:-1]
    return re.sub(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|[\s\S])", _unescape, body)


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "x" and len(code) > 1:
        return chr(int(code[1:], 16))
    if code[0] in "01234567":
        return chr(int(code, 8) & 0xFF)
    return _ESCAPES.get(code, code)


def tokenize(text: str) -> list[Token]:
    """All tokens of ``text``; a character no rule takes is a one-character token, as in
    lexer.l (the parser rejects it where it does not belong)."""
    if len(text) > MAX_SCRIPT_BYTES:
        raise DrillError(1, f"script is {len(text)} bytes (at most {MAX_SCRIPT_BYTES})")
    tokens: list[Token] = []
    pos, line, end = 0, 1, len(text)
    while pos < end:
        skip = _SKIP.match(text, pos)
        if skip:
            line += skip.group().count("\n")
            pos = skip.end()
            continue
        if text.startswith("/*", pos):
            raise DrillError(line, "unterminated /* comment")
        best_kind, best_text = "", ""
        for kind, rule in _RULES:
            m = rule.match(text, pos)
            if m and len(m.group()) > len(best_text):
                best_kind, best_text = kind, m.group()
        if not best_text:
            char = text[pos]
            if char in "\"`" or text.startswith("%{", pos):
                raise DrillError(line, f"unterminated {char if char != '%' else '%{'} ...")
            tokens.append(Token(char, char, line))
            pos += 1
            continue
        value: object = None
        kind = best_kind
        if kind == "INTEGER":
            value = int(best_text)
        elif kind == "HEX_INTEGER":
            value = int(best_text, 16)
        elif kind == "FLOAT":
            value = float(best_text)
        elif kind == "STRING":
            value = _unquote(best_text)
        elif kind == "BACK_QUOTED":  # for the shell: a backslash-newline continues the line
            value = best_text[1:-1].replace("\\\n", " ")
        elif kind == "CODE":
            value = best_text[2:-2]
        elif kind == "WORD" and best_text in KEYWORDS:
            kind = best_text.upper()
        elif kind == "OPTION":
            value = best_text[2:]
        tokens.append(Token(kind, best_text, line, value))
        line += best_text.count("\n")
        pos += len(best_text)
    return tokens
