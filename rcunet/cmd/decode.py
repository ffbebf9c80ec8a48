"""``rcunet decode FILE``: one tcpdump-style line per frame of a pcap or pcapng capture.

The lines follow ``tcpdump -nn -tt -S -r FILE`` (see ``rcunet.wire.pretty``).  A file
that is missing, unreadable or not a capture is one line on stderr and exit status 1;
frames before a corrupt spot are printed first.
"""

from __future__ import annotations

import argparse
import sys

from rcunet.cli import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="a pcap or pcapng capture ('-' reads standard input)")
    parser.add_argument("-c", "--count", type=int, metavar="COUNT",
                        help="stop after COUNT frames")
    parser.add_argument("--verify-checksums", action="store_true",
                        help="check IPv4/TCP/UDP/ICMP checksums and mark the bad ones "
                             "the way tcpdump -v does ('incorrect')")


def run(args: argparse.Namespace) -> int:
    from rcunet.link import pcap
    from rcunet.wire import pretty

    if args.count is not None and args.count < 1:
        raise UsageError(f"-c needs a count >= 1, got {args.count}")
    source = sys.stdin.buffer if args.file == "-" else args.file
    records = pcap.read_records(source)
    printed = 0
    while args.count is None or printed < args.count:
        try:
            record = next(records)
        except StopIteration:
            break
        except pcap.PcapError as exc:
            print(f"rcunet decode: {args.file}: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"rcunet decode: {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(pretty.line(record.timestamp_ns, record.frame, record.linktype,
                          verify_checksums=args.verify_checksums))
        printed += 1
    return 0
