"""The console's Starlette application: server-rendered pages, plain HTML forms (each with a CSRF
token), and one server-sent-event stream that replaces the pending list when it changes (the
page works without JavaScript; it then shows the list as of its loading).

Routes (docs/CONSOLE.md):
  GET  /                      pending confirmations of the person's tenants, newest first
  GET  /events                SSE: ``pending`` events carrying the re-rendered list
  GET  /t/{tenant}/i/{id}     an item: the card while pending, its whole event trail once decided
  POST /t/{tenant}/i/{id}/approve, /deny   form: csrf_token, digest (the one shown), note
  GET|POST /login, POST /logout            static-token mode only (server-side sessions)
  GET  /healthz               liveness (no authentication, no Host check)

A browser without a session that asks for a page is sent to ``/login?next=<the page>`` and back
after signing in; a request that presented a token, asks for something else than HTML, or posts
a form answers 401. Every other request's ``Host`` must be one the console serves (421).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from callgate.console.auth import Authenticator, Csrf, Identity, Tenants
from callgate.console.config import AuthMode, ConsoleConfig
from callgate.console.hub import PendingHub
from callgate.console.notify import Notifier
from callgate.console.render import json_visible, text_visible
from callgate.console.sessions import SignInLimiter
from callgate.console.sidecar import ConsoleCallError, PendingItem, SidecarLink

log = logging.getLogger("callgate.console")

HERE = Path(__file__).resolve().parent
SSE_WAIT_S = 15.0
"""How long an SSE stream waits for a change before re-sending (time left stays current)."""
NOTE_MAX = 500
IDENTITY_MAX = 320
UNAUTHORIZED = "Sign in: a valid token is required."
APPROVE_PREFIX = len("sha256:") + 12
"""Characters of the digest the approval's confirming button names (and sends back)."""


def digest_prefix(digest: str) -> str:
    return digest[:APPROVE_PREFIX]


CONFIRM_STEP = (
    "Refused: an approval is confirmed with the button that names its digest. Nothing was approved."
)

REFUSALS = {
    "confirmation_digest_mismatch": "The arguments you approved are not the ones waiting: the digest "
    "on your page differs from the parked invocation. It was cancelled; nothing runs.",
    "confirmation_not_pending": "This invocation no longer waits for a confirmation (it was decided, "
    "cancelled or replaced). Nothing was approved.",
    "confirmation_expired": "The confirmation window has passed; the invocation was cancelled.",
    "deadline_exceeded": "The invocation's deadline has passed; it was cancelled.",
    "invocation_not_found": "No such invocation for this tenant.",
}


def time_left(seconds: int) -> str:
    if seconds <= 0:
        return "expired"
    m, s = divmod(seconds, 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


@dataclass(frozen=True)
class Console:
    """The running console's parts (built in :func:`build`)."""

    cfg: ConsoleConfig
    auth: Authenticator
    tenants: Tenants
    csrf: Csrf
    link: SidecarLink
    hub: PendingHub
    notifier: Notifier
    env: jinja2.Environment
    limiter: SignInLimiter

    def render(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(**ctx)
        return HTMLResponse(html, status_code=status)

    def list_html(self, who: Identity, items: list[PendingItem]) -> str:
        return self.env.get_template("_items.html").render(
            items=items, csrf=self.csrf.token(who), now=datetime.now(UTC)
        )


class SecurityHeaders(BaseHTTPMiddleware):
    """The ``Host`` check (421 for a name the console does not serve) and the security headers."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        hosts: frozenset[str] = request.app.state.console.cfg.hosts
        host = request.headers.get("host", "").lower()
        if request.url.path != "/healthz" and host not in hosts:
            response: Response = PlainTextResponse("misdirected request: unknown Host", 421)
        elif request.method not in SAFE_METHODS and _cross_origin(request.headers, hosts):
            response = PlainTextResponse(CROSS_ORIGIN, 403)
        else:
            response = await call_next(request)
        h = response.headers
        h.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        )
        h.setdefault("X-Content-Type-Options", "nosniff")
        # same-origin, not no-referrer: under no-referrer a browser sends ``Origin: null`` on the
        # console's own forms, and the cross-origin check below needs their real origin
        h.setdefault("Referrer-Policy", "same-origin")
        h.setdefault("X-Frame-Options", "DENY")
        if not request.url.path.startswith("/static/"):
            h.setdefault("Cache-Control", "no-store")
        return response


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_ORIGIN = "Refused: a form posted from another site. Nothing was changed."


def _cross_origin(headers: Headers, hosts: frozenset[str]) -> bool:
    """Whether a browser says this request comes from another origin: an ``Origin`` whose host is
    not one the console serves (``null`` included; an ingress may rewrite ``Host``, so any served
    name counts), or ``Sec-Fetch-Site`` other than ``same-origin`` and
    ``none`` (a sibling host of the same site included). A request naming neither (a script, an
    old browser) is left to the CSRF token, which every POST needs anyway."""
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() not in hosts:
        return True
    site = headers.get("sec-fetch-site")
    return site is not None and site.lower() not in ("same-origin", "none")


Handler = Callable[[Request, "Console", Identity], Awaitable[Response]]


def build(cfg: ConsoleConfig) -> tuple[Starlette, Console]:
    """The application and its parts (nothing is started until the app's lifespan)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["time_left"] = time_left
    env.filters["json_visible"] = json_visible
    env.filters["visible"] = text_visible
    env.filters["digest_prefix"] = digest_prefix
    link = SidecarLink(cfg.confirmer_target, cfg.rpc_timeout_s)
    tenants = Tenants(cfg)
    notifier = Notifier(_webhook_url(cfg), cfg.notify.timeout_s, cfg.link_base)
    console = Console(
        cfg=cfg,
        auth=Authenticator(cfg),
        tenants=tenants,
        csrf=Csrf.load(cfg),
        link=link,
        hub=PendingHub(link, tenants.all, notifier),
        notifier=notifier,
        env=env,
        limiter=SignInLimiter(cfg.login_max_failures, cfg.login_window_s, cfg.login_lockout_s),
    )

    def authed(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            who = await console.auth.identify(request.headers, request.cookies)
            if who is None:
                static = console.auth.mode is AuthMode.STATIC
                if (
                    static
                    and request.method == "GET"
                    and not console.auth.presented(request.headers)
                    and "text/html" in request.headers.get("accept", "")
                ):
                    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse(f"/login?next={quote(back, safe='')}", 303)
                return console.render("denied.html", 401, login=static, message=UNAUTHORIZED)
            return await handler(request, console, who)

        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.hub.start()
        try:
            yield
        finally:
            await console.hub.close()
            await console.notifier.close()
            await console.link.close()

    routes = [
        Route("/healthz", lambda r: PlainTextResponse("ok")),
        Route("/", authed(index)),
        Route("/events", authed(events)),
        Route("/t/{tenant}/i/{invocation_id}", authed(item)),
        Route("/t/{tenant}/i/{invocation_id}/{action:str}", authed(decide), methods=["POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])
    app.state.console = console
    return app, console


def _webhook_url(cfg: ConsoleConfig) -> str:
    if cfg.notify.webhook_url_env:
        return os.environ.get(cfg.notify.webhook_url_env, "")
    return cfg.notify.webhook_url


async def index(request: Request, c: Console, who: Identity) -> Response:
    tenants = c.tenants.of(who)
    items: list[PendingItem] = []
    error = ""
    for t in tenants:
        try:
            items += await c.link.pending(t)
        except ConsoleCallError as exc:
            error = f"The sidecar did not answer ({exc.code}); the list may be incomplete."
    items.sort(key=lambda i: (i.created_at, i.invocation_id), reverse=True)
    return c.render(
        "index.html",
        who=who,
        tenants=tenants,
        items_html=c.list_html(who, items),
        error=error,
        csrf=c.csrf.token(who),
        logout=c.auth.mode is AuthMode.STATIC,
    )


async def events(request: Request, c: Console, who: Identity) -> Response:
    tenants = c.tenants.of(who)

    async def stream() -> AsyncIterator[dict[str, str]]:
        seen = -1
        while True:
            seen = await c.hub.wait(seen, SSE_WAIT_S)
            if await c.auth.identify(request.headers, request.cookies) != who:
                return  # signed out, revoked or expired: the stream ends with the session
            yield {"event": "pending", "data": c.list_html(who, c.hub.items(tenants))}

    return EventSourceResponse(stream(), ping=SSE_WAIT_S, headers={"Cache-Control": "no-store"})


def _allowed(c: Console, who: Identity, tenant: str) -> bool:
    return tenant in c.tenants.of(who)


async def _item_page(
    c: Console, who: Identity, tenant: str, invocation_id: str, *, refusal: ConsoleCallError | None = None,
    done: str = "",
) -> Response:  # fmt: skip
    not_found = c.render("denied.html", 404, login=False, message=REFUSALS["invocation_not_found"])
    if not _allowed(c, who, tenant):
        return not_found  # another tenant's item answers like an unknown one
    try:
        trail = await c.link.trail(tenant, invocation_id)
    except ConsoleCallError as exc:
        if exc.code in ("invocation_not_found", "invalid_request"):
            return not_found
        return c.render("denied.html", 502, login=False, message=f"The sidecar did not answer ({exc.code}).")
    status = 200
    if refusal is not None:
        status = 409 if refusal.code in REFUSALS else 502
    return c.render(
        "item.html",
        status,
        who=who,
        trail=trail,
        csrf=c.csrf.token(who),
        now=datetime.now(UTC),
        refusal=refusal,
        refusal_text=REFUSALS.get(refusal.code, refusal.message) if refusal else "",
        done=done,
        logout=c.auth.mode is AuthMode.STATIC,
    )


async def item(request: Request, c: Console, who: Identity) -> Response:
    done = request.query_params.get("done", "")
    return await _item_page(
        c, who, request.path_params["tenant"], request.path_params["invocation_id"],
        done=done if done in ("approved", "denied") else "",
    )  # fmt: skip


async def decide(request: Request, c: Console, who: Identity) -> Response:
    tenant, invocation_id = request.path_params["tenant"], request.path_params["invocation_id"]
    action = request.path_params["action"]
    form = await request.form()
    if not c.csrf.valid(who, str(form.get("csrf_token", ""))):
        return c.render(
            "denied.html", 403, login=False, message="Refused: the form's CSRF token is missing or wrong."
        )
    if action not in ("approve", "deny") or not _allowed(c, who, tenant):
        return c.render("denied.html", 404, login=False, message=REFUSALS["invocation_not_found"])
    digest = str(form.get("digest", ""))
    note = str(form.get("note", ""))[:NOTE_MAX]
    if action == "approve" and (not digest or str(form.get("confirm", "")) != digest_prefix(digest)):
        # An approval is the second, card-local step that names the digest it approves
        return c.render("denied.html", 400, login=False, message=CONFIRM_STEP)
    try:
        if action == "approve":
            await c.link.confirm(tenant, invocation_id, digest, who.name, note)
        else:
            await c.link.deny(tenant, invocation_id, digest, who.name, note)
    except ConsoleCallError as exc:
        log.info("console: %s of %s by %s refused: %s", action, invocation_id, who.name, exc.code)
        return await _item_page(c, who, tenant, invocation_id, refusal=exc)
    log.info("console: %s of %s by %s", action, invocation_id, who.name)
    done = "approved" if action == "approve" else "denied"
    return RedirectResponse(f"/t/{quote(tenant, safe='')}/i/{quote(invocation_id, safe='')}?done={done}", 303)


def _next(value: object) -> str:
    """Where to go after signing in: a path of this console only (never another origin)."""
    text = str(value or "")
    ok = text.startswith("/") and not text.startswith("//") and "\\" not in text and len(text) < 2048
    return text if ok and all(32 < ord(ch) < 127 for ch in text) else "/"


def _login_form(
    c: Console, status: int = 200, error: str = "", next_: str = "/", identity: str = ""
) -> Response:
    """The sign-in form with a fresh CSRF nonce, set as a double-submit cookie."""
    nonce = secrets.token_urlsafe(24)
    resp = c.render("login.html", status, csrf=nonce, error=error, next=next_, identity=identity)
    resp.set_cookie(
        c.auth.login_csrf_cookie,
        nonce,
        httponly=True,
        samesite="strict",
        secure=c.cfg.cookie_secure,
        path="/",
    )
    return resp


async def login(request: Request) -> Response:
    c: Console = request.app.state.console
    if c.auth.mode is not AuthMode.STATIC:
        return c.render("denied.html", 404, login=False, message="Sign-in is done by the ingress (OIDC).")
    if request.method == "GET":
        return _login_form(c, next_=_next(request.query_params.get("next")))
    form = await request.form()
    cookie = request.cookies.get(c.auth.login_csrf_cookie, "")
    presented = str(form.get("csrf_token", ""))
    if not cookie or not secrets.compare_digest(cookie.encode(), presented.encode()):
        return c.render(
            "denied.html", 403, login=True, message="Refused: the form's CSRF token is missing or wrong."
        )
    next_ = _next(form.get("next"))
    identity = str(form.get("identity", "")).strip()[:IDENTITY_MAX]
    client = request.client.host if request.client else ""
    locked = c.limiter.locked(client, identity)
    if locked is not None:
        log.info("console: sign-in refused, %s locked out", locked.value)
        return _login_form(c, 429, "Too many failed sign-ins: try again later.", next_, identity)
    sid = c.auth.sign_in(identity, str(form.get("token", "")), request.cookies.get(c.auth.session_cookie, ""))
    if sid is None:
        c.limiter.failed(client, identity)
        return _login_form(c, 401, "Unknown identity or token.", next_, identity)
    c.limiter.succeeded(client, identity)
    log.info("console: %s signed in", identity)
    done = RedirectResponse(next_, 303)
    done.set_cookie(
        c.auth.session_cookie, sid, httponly=True, samesite="strict", secure=c.cfg.cookie_secure, path="/"
    )
    done.delete_cookie(c.auth.login_csrf_cookie, path="/", secure=c.cfg.cookie_secure, httponly=True)
    return done


async def logout(request: Request) -> Response:
    c: Console = request.app.state.console
    who = await c.auth.identify(request.headers, request.cookies)
    form = await request.form()
    if who is None or not c.csrf.valid(who, str(form.get("csrf_token", ""))):
        return c.render(
            "denied.html", 403, login=True, message="Refused: the form's CSRF token is missing or wrong."
        )
    c.auth.sign_out(who)
    resp = RedirectResponse("/login", 303)
    resp.delete_cookie(c.auth.session_cookie, path="/", secure=c.cfg.cookie_secure, httponly=True)
    return resp


def run(cfg: ConsoleConfig) -> int:
    """Serve the console until interrupted (uvicorn)."""
    app, _ = build(cfg)
    host, port = cfg.host_port
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="info", lifespan="on", proxy_headers=False)
    )
    server.run()
    return 0


__all__ = ["Console", "build", "run", "time_left"]
