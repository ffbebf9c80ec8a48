"""MkDocs hook: the reference pages generated from the code itself.

A page asks for a generated part with an HTML comment on a line of its own:

    <!-- generated:commands -->   every `rcunet` command and option, from the argparse parsers
    <!-- generated:sysctls -->    Tuning's fields: Linux sysctls and the seed switches
    <!-- generated:counters -->   the nstat counter names the stack's source uses

so the reference cannot drift from `--help`, `Tuning` or the counters.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated:([a-z]+) -->$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (mkdocs API)
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


# ---- commands -------------------------------------------------------------------------


def _cell(text: str) -> str:
    text = " ".join(text.split())
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
            .replace(">", "&gt;").replace("*", "\\*"))


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            flags = ", ".join(action.option_strings)
            if action.nargs != 0:
                flags += " " + formatter._format_args(action, action.dest.upper())
        else:
            flags = formatter._format_args(action, action.dest)
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{flags}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| option | meaning |", "|---|---|", *rows, ""]


def _command_section(words: list[str], parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} {' '.join(words)}", ""]
    if parser.description:
        out += [_cell(parser.description), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    out += _option_rows(parser)
    for name, child in _subparsers(parser):
        out += _command_section([*words, name], child, min(level + 1, 4))
    return out


def commands() -> str:
    from rcunet.cli import build_parser

    parser = build_parser(None)
    parser.prog = "rcunet"
    out = ["`rcunet` and every subcommand, generated from the parsers `rcunet --help` "
           "prints; `rcunet COMMAND --help` says the same on a terminal.", ""]
    out += _option_rows(parser)
    for name, child in _subparsers(parser):
        out += _command_section(["rcunet", name], child, 2)
    return "\n".join(out)


# ---- sysctls ----------------------------------------------------------------------------


FIELD_LINE = re.compile(r"^    (\w+): [^=]+=[^#]*(?:#\s*(.*))?$")


def _field_comments(source: str) -> dict[str, str]:
    """Each dataclass field's `#:` comment lines above it, else its trailing comment."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        m = FIELD_LINE.match(line)
        if m:
            note = " ".join(pending) or (m.group(2) or "")
            if note:
                comments[m.group(1)] = note
        pending = []
    return comments


def sysctls() -> str:
    import rcunet.tuning as tuning

    comments = _field_comments(Path(tuning.__file__).read_text(encoding="utf-8"))
    seed_of = {name: seed for seed, names in tuning.SEED_SWITCHES.items() for name in names}
    switches = ["| switch | seed | modern (default) | legacy | what it does |",
                "|---|---|---|---|---|"]
    knobs = ["| sysctl | default | notes |", "|---|---|---|"]
    modern, legacy = tuning.Tuning.modern(), tuning.Tuning.legacy()
    for f in dataclasses.fields(tuning.Tuning):
        note = _cell(comments.get(f.name, ""))
        if f.name in seed_of:
            switches.append(f"| `{f.name}` | {seed_of[f.name]} | `{getattr(modern, f.name)}` "
                            f"| `{getattr(legacy, f.name)}` | {note} |")
        else:
            value = getattr(modern, f.name)
            shown = repr(value) if not isinstance(value, frozenset) else "{}"
            knobs.append(f"| `{f.name}` | `{_cell(shown)}` | {note} |")
    return "\n".join(["### Seed switches", "", *switches, "", "### Sysctls", "", *knobs, ""])


# ---- counters ---------------------------------------------------------------------------

COUNTER = re.compile(r"^(Ip|Ip6|IpExt|Icmp|Icmp6|IcmpMsg|Udp|Udp6|UdpLite|Tcp|TcpExt|Rcunet)"
                     r"[A-Z][A-Za-z0-9]+$")
STACK_PACKAGES = ("wire", "core", "sync", "tables", "host", "link", "api", "services",
                  "control")


def counters() -> str:
    where: dict[str, set[str]] = defaultdict(set)
    for package in STACK_PACKAGES:
        for path in sorted((ROOT / "rcunet" / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and COUNTER.match(node.value):
                    where[node.value].add(module.removesuffix(".__init__"))
    groups: dict[str, list[str]] = defaultdict(list)
    for name in sorted(where):
        groups[COUNTER.match(name).group(1)].append(name)  # type: ignore[union-attr]
    out = [f"{len(where)} counters, in nstat's names; `Rcunet*` are rcunet's own (its links "
           "and workers, which have no Linux counterpart).", ""]
    for prefix, names in groups.items():
        out += [f"### {prefix}", "", "| counter | kept in |", "|---|---|"]
        out += [f"| `{n}` | {', '.join(f'`{m}`' for m in sorted(where[n]))} |" for n in names]
        out.append("")
    return "\n".join(out)


GENERATORS = {"commands": commands, "sysctls": sysctls, "counters": counters}
