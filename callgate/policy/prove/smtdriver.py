"""A cvc5 executable made of PyPI's ``cvc5`` bindings: SMT-LIB 2.6 on stdin, answers on stdout.

``cedar-policy-symcc`` runs the solver named by the ``CVC5`` environment variable as
``$CVC5 --lang smt [--tlimit=MS | --tlimit-per=MS ...]`` and talks to it interactively: it writes
commands line by line, flushes, and reads one answer line for ``(check-sat)`` (``sat``, ``unsat``,
``unknown``) and the model block for ``(get-model)``. PyPI's ``cvc5`` 1.3.1 wheel carries the
solver library but no executable; this driver is that executable (``scripts/solver`` writes the
wrapper ``.cache/bin/cvc5`` that runs it, docs/PROVE.md).

It reads stdin, cuts it into whole top-level commands (strings, ``|quoted symbols|`` and comments
respected), hands them to cvc5's own SMT-LIB parser (the commands up to one the caller waits on,
``check-sat`` or ``get-model``, as one batch) and runs them, writing what they print (the same
printer the cvc5 binary uses) and flushing. ``(reset)`` starts a fresh solver with the
command-line options, as the cvc5 binary does. ``--key=value`` options are set on every solver; a
parse error prints ``(error "Parse Error: ...")`` and ends the process with status 1, as cvc5 does.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, Any

import cvc5  # type: ignore[import-untyped]

__all__ = ["commands", "main"]


def commands(stream: IO[str]) -> Iterator[str]:
    """Whole top-level SMT-LIB commands from ``stream``, each yielded as soon as it is complete."""
    buf: list[str] = []
    depth = 0
    in_string = in_symbol = False
    for line in iter(stream.readline, ""):
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if in_string:
                buf.append(ch)
                if ch == '"':
                    if i + 1 < n and line[i + 1] == '"':  # "" is an escaped quote
                        buf.append('"')
                        i += 1
                    else:
                        in_string = False
            elif in_symbol:
                buf.append(ch)
                in_symbol = ch != "|"
            elif ch == ";":  # a comment runs to the end of the line
                i = line.find("\n", i)
                if i < 0:
                    break
                continue
            elif ch == '"':
                in_string = True
                buf.append(ch)
            elif ch == "|":
                in_symbol = True
                buf.append(ch)
            elif ch == "(":
                depth += 1
                buf.append(ch)
            elif ch == ")":
                depth -= 1
                buf.append(ch)
                if depth == 0:
                    yield "".join(buf).strip()
                    buf.clear()
            elif depth > 0 or not ch.isspace():
                buf.append(ch)
            i += 1


def _options(argv: list[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    it = iter(argv)
    for arg in it:
        if arg in ("--lang", "--input-language"):
            lang = next(it, "")
            if lang not in ("smt", "smt2", "smtlib2.6", "smt2.6"):
                raise SystemExit(f"cvc5 driver: only SMT-LIB input is supported (--lang {lang})")
        elif arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            out.append((key, value or "true"))
        else:
            raise SystemExit(f"cvc5 driver: input files are not supported ({arg}); commands come on stdin")
    return out


class _Session:
    """One solver, its symbol manager and parser; replaced whole by ``(reset)``."""

    def __init__(self, options: list[tuple[str, str]]) -> None:
        self.tm: Any = cvc5.TermManager()
        self.solver: Any = cvc5.Solver(self.tm)
        for key, value in options:
            self.solver.setOption(key, value)
        self.sm: Any = cvc5.SymbolManager(self.tm)

    def run(self, text: str) -> tuple[str, bool]:
        """What ``text`` prints, and whether the session goes on."""
        # a parser per command (the symbol manager keeps the declarations): cvc5 1.3.1's
        # incremental input is dropped by some commands (``set-option``)
        parser = cvc5.InputParser(self.solver, self.sm)
        parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "<stdin>")
        printed: list[str] = []
        while True:
            try:
                cmd = parser.nextCommand()
            except RuntimeError as exc:  # cvc5 raises CVC5ApiException (a RuntimeError) on bad input
                message = str(exc).replace('"', '""')
                printed.append(f'(error "Parse Error: {message}")\n')
                return "".join(printed), False
            if cmd.isNull():
                return "".join(printed), True
            answer = cmd.invoke(self.solver, self.sm)
            if answer.startswith("unknown"):  # "unknown (TIMEOUT)": the binary prints the word alone
                answer = "unknown\n"
            printed.append(answer)


ANSWERING = ("check-sat", "get-", "echo")
"""Commands whose answer the caller waits for: what is pending runs then (a declaration prints
nothing unless it fails, so running the commands in between as one batch, one parse, prints the
same text in the same order, ahead of the answer the caller reads)."""


def main(argv: list[str] | None = None) -> int:
    options = _options(sys.argv[1:] if argv is None else argv)
    session = _Session(options)
    out = sys.stdout
    pending: list[str] = []

    def flush() -> bool:
        if not pending:
            return True
        printed, going = session.run("\n".join(pending))
        pending.clear()
        out.write(printed)
        out.flush()
        return going

    for text in commands(sys.stdin):
        head = text[1:].lstrip().split(None, 1)[0].rstrip(")") if len(text) > 1 else ""
        if head == "exit":
            return 0 if flush() else 1
        if head == "reset":
            if not flush():
                return 1
            session = _Session(options)
            continue
        pending.append(text)
        if head.startswith(ANSWERING) and not flush():
            return 1
    return 0 if flush() else 1


if __name__ == "__main__":
    sys.exit(main())
