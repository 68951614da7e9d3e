"""The MCP gateway (``callgate mcp``, docs/MCP.md): callgate in front of upstream MCP servers for
any MCP client. The core never imports this package; it imports the ``mcp`` SDK (the ``mcp``
extra) and talks to the sidecar only through :mod:`callgate.client`.

  config.py    the ``[mcp]`` table (identity, HTTP bearer validation, upstreams)
  pins.py      definition digests, the ToolSpecs ``import`` writes, ``check``'s comparison
  upstreams.py connections to upstream servers (stdio / streamable HTTP) and call outcomes
  auth.py      bearer tokens (static file, JWT + JWKS) for the HTTP gateway
  gateway.py   tools/list and tools/call through the chain (McpCode: the gateway's codes)
  serve.py     ``callgate mcp serve``: embedded sidecar, upstreams, stdio or HTTP
  cli.py       ``callgate mcp serve | import | check``
"""
