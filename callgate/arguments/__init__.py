"""The argument library (spec 6.3 - 6.5): what a tool call's argument bytes become, with no I/O
and nothing of the request pipeline.

    parse.py       strict JSON (6.3, 6.4 layer 1)
    validate/      JSON Schema 2020-12, compiled once, format asserted (6.4 layer 2)
    normalize.py   declared normalizers (6.4 layer 3, 6.5)
    textpolicy.py  the declared text classes of string fields (issue 33)
    digest.py      RFC 8785 canonical bytes and the invocation digest (6.5)

``propose/`` (the pipeline), ``policy/`` (ToolSpecs), ``execute/``, ``credentials/`` and ``mcp/``
import it; it imports only ``core/``.
"""
