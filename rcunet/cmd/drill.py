"""``rcunet drill``: run packetdrill scripts against an rcunet Host on the virtual clock.

    rcunet drill [--family 4|6|both] [--verbose] [--json] PATH...

One line per script and family (pass / fail / unsupported / error); a failure prints the
script line, what was expected and what the stack did, packetdrill-style.  Directories
are searched for ``*.pkt``.  Exit status 1 when any script failed or could not be run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when run, so the other commands never load the drill engine
    from rcunet.drill.runner import Result


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="packetdrill scripts, or directories of *.pkt")
    parser.add_argument("--family", choices=("4", "6", "both"), default="both",
                        help="IP version to run each script in (default both, as the "
                             "kernel selftests' runner)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print the whole exchange of each script")
    parser.add_argument("--json", action="store_true", help="one JSON document of results")
    parser.add_argument("--table", action="store_true",
                        help="a Markdown table: one row per script, its result per family "
                             "and the first failure's reason (docs/CONFORMANCE.md)")
    parser.add_argument("--root", default=None,
                        help="with --table: print script paths relative to this directory")


def find_scripts(paths: list[str]) -> list[str]:
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.extend(os.path.join(root, name) for name in sorted(files)
                             if name.endswith(".pkt"))
        else:
            found.append(path)
    return found


def run(args: argparse.Namespace) -> int:
    from rcunet.drill.errors import DrillError
    from rcunet.drill.parser import parse_file
    from rcunet.drill.runner import Result, run_script

    families = (4, 6) if args.family == "both" else (int(args.family),)
    results: list[Result] = []
    started = time.monotonic()
    for path in find_scripts(args.paths):
        try:
            script = parse_file(path)
        except DrillError as exc:
            for family in families:
                result = Result(path, family, "error", exc.line, exc.message)
                results.append(result)
                _print(result, args)
            continue
        for family in families:
            result = run_script(script, family, verbose=args.verbose)
            results.append(result)
            _print(result, args)
    elapsed = time.monotonic() - started
    counts = {k: sum(1 for r in results if r.status == k)
              for k in ("pass", "fail", "unsupported", "error")}
    if args.table:
        print(table(results, families, args.root))
    elif args.json:
        json.dump({"results": [{"path": r.path, "family": r.family, "status": r.status,
                                "line": r.line, "message": r.message} for r in results],
                   "counts": counts, "seconds": round(elapsed, 3)}, sys.stdout, indent=1)
        print()
    else:
        print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['unsupported']} "
              f"unsupported, {counts['error']} errors ({len(results)} runs, "
              f"{elapsed:.1f} s)")
    return 0 if counts["pass"] == len(results) else 1


def table(results: list[Result], families: tuple[int, ...], root: str | None) -> str:
    """Markdown: script | IPv4 | IPv6 | reason (the first non-pass message, one line)."""
    rows: dict[str, dict[int, Result]] = {}
    for r in results:
        rows.setdefault(r.path, {})[r.family] = r
    head = "| script | " + " | ".join(f"IPv{f}" for f in families) + " | reason |"
    lines = [head, "|---|" + "---|" * len(families) + "---|"]
    for path, by_family in rows.items():
        name = os.path.relpath(path, root) if root else path
        # A script that pins --ip_version runs only in that family, as the kernel's
        # ksft_runner.sh runs it: the other family's cell is n/a, not a failure.
        for f in [f for f, r in by_family.items() if _pinned_out(r)]:
            del by_family[f]
        cells = [by_family[f].status if f in by_family else "n/a" for f in families]
        reason = ""
        for f in families:
            run = by_family.get(f)
            if run is not None and run.status != "pass":
                first = run.message.split("\n")[0]
                reason = f"line {run.line}: {first}".replace("|", "\\|")
                break
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {reason} |")
    passed = sum(1 for by in rows.values()
                 if by and all(r.status == "pass" for r in by.values()))
    lines.append("")
    lines.append(f"{passed} of {len(rows)} scripts pass in every family run.")
    return "\n".join(lines)


def _print(r: Result, args: argparse.Namespace) -> None:
    if args.json or args.table:
        return
    tag = {4: "ipv4", 6: "ipv6"}[r.family]
    line = f"{r.status:<11} {tag} {r.path}"
    if r.status != "pass":
        first, *rest = r.message.split("\n")
        line += f":{r.line}: {first}"
        for extra in rest:
            line += "\n" + " " * 12 + extra.strip()
    print(line)
    if args.verbose:
        for text in r.exchange:
            print("    " + text)
    sys.stdout.flush()


def _pinned_out(result: Result) -> bool:
    """The run of a family the script's --ip_version excludes."""
    return (result.status == "unsupported"
            and result.message.startswith("the script pins --ip_version"))
