"""The confirmation console (`callgate console`, issue 13, docs/CONSOLE.md): a small web
application for the confirmer role. People see the pending confirmations of the tenants they may
approve, live, and approve or deny exactly the digest they were shown. It reaches the sidecars
only through the confirmer listener (``Confirmations`` service); the core never imports it.

  config.py   ConsoleConfig: the ``[console]`` TOML file, typed and checked
  auth.py     who is asking (static tokens or OIDC JWTs), which tenants they may approve, CSRF
  sidecar.py  the confirmer listener's calls (grpc.aio) and the items they return
  hub.py      PendingHub: one WatchPending stream per tenant, subscribers (SSE), notifications
  notify.py   the optional Slack-compatible webhook
  app.py      the Starlette application (pages, forms, SSE) and ``run``
"""
