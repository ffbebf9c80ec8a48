"""``%{ ... }%`` blocks: Python assertions over a TCP_INFO snapshot, as packetdrill runs
them (``code.c``: the values of ``struct tcp_info`` at that point of the script, as
``tcpi_*`` names), in a restricted namespace: no imports, no attribute access, no
builtins but a few pure ones."""

from __future__ import annotations

import ast

from rcunet.drill.errors import DrillError, DrillUnsupported

_SAFE_BUILTINS = {"abs": abs, "min": min, "max": max, "len": len, "int": int,
                  "float": float, "round": round, "print": lambda *a, **k: None,
                  "True": True, "False": False, "None": None, "range": range,
                  "sum": sum, "all": all, "any": any}
_ALLOWED = (ast.Module, ast.Expr, ast.Assert, ast.Assign, ast.AugAssign, ast.Name,
            ast.Load, ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp,
            ast.Compare, ast.Call, ast.IfExp, ast.If, ast.Tuple, ast.List, ast.operator,
            ast.unaryop, ast.boolop, ast.cmpop, ast.keyword, ast.JoinedStr,
            ast.FormattedValue, ast.Pass)


#: The constants packetdrill's code.c defines for the blocks (linux/tcp.h).
CONSTANTS = {"TCP_CA_Open": 0, "TCP_CA_Disorder": 1, "TCP_CA_CWR": 2, "TCP_CA_Recovery": 3,
             "TCP_CA_Loss": 4, "TCPI_OPT_TIMESTAMPS": 1, "TCPI_OPT_SACK": 2,
             "TCPI_OPT_WSCALE": 4, "TCPI_OPT_ECN": 8, "TCPI_OPT_ECN_SEEN": 16,
             "TCPI_OPT_SYN_DATA": 32, "TCPI_OPT_USEC_TS": 64, "TCPI_OPT_TFO_CHILD": 128,
             # tcpi_state values (include/net/tcp_states.h)
             "TCP_ESTABLISHED": 1, "TCP_SYN_SENT": 2, "TCP_SYN_RECV": 3,
             "TCP_FIN_WAIT1": 4, "TCP_FIN_WAIT2": 5, "TCP_TIME_WAIT": 6, "TCP_CLOSE": 7,
             "TCP_CLOSE_WAIT": 8, "TCP_LAST_ACK": 9, "TCP_LISTEN": 10, "TCP_CLOSING": 11}


class CodeFailure(Exception):
    """An assertion of the block failed (the message says which)."""


def run_code(line: int, text: str, values: dict[str, int],
             script_names: dict[str, object] | None = None) -> None:
    """Run one block over ``values`` (the TCP_INFO snapshot).  ``script_names``: the
    names earlier blocks of the script assigned, which this block sees and may add to:
    packetdrill's code.c writes every block of a script into one Python file, each
    after fresh ``tcpi_*`` assignments, so a name set in one block (``cwnd = 58``) is
    there in the next, and the snapshot's names win over the script's own."""
    # packetdrill's code.c writes each block followed by two newlines: a last line
    # ending in a backslash continues into an empty one, which Python accepts
    source = "\n".join(part.rstrip() for part in _dedent(text).splitlines()) + "\n\n"
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as exc:
        raise DrillError(line + (exc.lineno or 1) - 1, f"code block: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise DrillUnsupported(line, f"code block uses {type(node).__name__}, which "
                                         "the restricted evaluator does not allow")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise DrillUnsupported(line, f"code block name {node.id}")
    names = script_names if script_names is not None else {}
    namespace: dict[str, object] = {"__builtins__": _SAFE_BUILTINS, **CONSTANTS, **names,
                                    **values}
    try:
        exec(compile(tree, "<code>", "exec"), namespace)  # noqa: S102 - vetted AST above
    except AssertionError as exc:
        raise CodeFailure(f"assertion failed: {exc}" if str(exc) else
                          "assertion failed") from None
    except NameError as exc:
        name = str(exc).split("'")[1] if "'" in str(exc) else str(exc)
        raise DrillUnsupported(line, f"code block reads {name}, which rcunet's TCP_INFO "
                                     "does not provide") from None
    except Exception as exc:  # noqa: BLE001 - the block is input: report, never raise
        raise DrillError(line, f"code block raised {type(exc).__name__}: {exc}") from None
    finally:
        _keep_assigned(names, namespace, values)


def _keep_assigned(names: dict[str, object], namespace: dict[str, object],
                   values: dict[str, int]) -> None:
    """The names the block assigned, for the script's later blocks (the snapshot's own
    names come fresh into each block, so they are not kept)."""
    for name, value in namespace.items():
        if name == "__builtins__" or name in values:
            continue
        if name in CONSTANTS and CONSTANTS[name] == value and name not in names:
            continue
        names[name] = value


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indents = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(x[cut:] for x in lines)
