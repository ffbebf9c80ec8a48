"""Our packetdrill corpus (tests/drill/*.pkt) against the stack, each script in IPv4 and
IPv6 as the kernel selftests' runner does; a failure shows the script line and the
evidence (what was expected, what rcunet did)."""

from __future__ import annotations

import glob
import os

import pytest

from rcunet.drill.parser import parse_file
from rcunet.drill.runner import run_script

HERE = os.path.dirname(__file__)
SCRIPTS = sorted(glob.glob(os.path.join(HERE, "*.pkt")))


def test_the_corpus_is_complete() -> None:
    assert len(SCRIPTS) >= 80


@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("path", SCRIPTS, ids=[os.path.basename(p)[:-4] for p in SCRIPTS])
def test_script(path: str, family: int) -> None:
    result = run_script(parse_file(path), family)
    assert result.status == "pass", f"{os.path.basename(path)}:{result.line}: {result.message}"
