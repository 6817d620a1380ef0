"""The dashboard of a cluster cvflow starts answers only its owner: a secret in its URL.

The scheduler's HTTP server (the Dask dashboard, its JSON and ``/info`` pages, which list the
workers' addresses, ``/health``, ``/metrics``, cvflow's live page) listens on a TCP port, which
every local user can reach (on a shared login node, every user of the cluster). Each cluster
cvflow starts, whose scheduler runs in this process (``local``, ``threads``, ``slurm``), gets a
random secret, as Jupyter's token: a request answers only when it carries the secret, as
``?token=`` (the URL cvflow prints) or as the cookie set by the first such answer (what the
dashboard's pages, their scripts and their Bokeh websockets send afterwards); anything else
answers 403. A scheduler cvflow did not start (``--cluster tcp://...``) is its owner's to
protect (docs/guide/execution.md, "Who can read a study").
"""
from __future__ import annotations

import hmac
import secrets
import weakref
from http.cookies import SimpleCookie

_SECRETS: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()
LINK_KEY = "distributed.dashboard.link"


def guard(cluster) -> str | None:
    """Put the gate in front of ``cluster``'s scheduler HTTP server (a scheduler in this
    process); its secret, or None when the scheduler runs elsewhere."""
    from tornado import web
    from tornado.routing import Matcher, Rule

    scheduler = getattr(cluster, "scheduler", None)
    app = getattr(scheduler, "http_application", None)
    server = getattr(scheduler, "http_server", None)
    if app is None or server is None:
        return None
    secret = secrets.token_urlsafe(24)
    # cookies are not told apart by port: one name per server, so that two dashboards on
    # 127.0.0.1 keep their own
    name = f"cvflow-dashboard-{server.port}"

    def carried(request) -> tuple[bool, bool]:
        """(the request carries the secret, as a cookie)."""
        cookie = request.cookies.get(name)
        if cookie is not None and hmac.compare_digest(cookie.value, secret):
            return True, True
        given = request.query_arguments.get("token", [b""])[-1]
        return hmac.compare_digest(given, secret.encode()), False

    class Refused(Matcher):
        """Matches every request without the secret."""

        def match(self, request):
            return None if carried(request)[0] else {}

    class Forbidden(web.RequestHandler):
        def prepare(self):
            raise web.HTTPError(403, "this page needs the URL cvflow printed (its token)")

    class Remembered(web.OutputTransform):
        """Sets the cookie on the answer to the URL that carries the secret."""

        def __init__(self, request):
            allowed, as_cookie = carried(request)
            self.set = allowed and not as_cookie

        def transform_first_chunk(self, status_code, headers, chunk, finishing):
            if self.set:
                morsel = SimpleCookie({name: secret})[name]
                morsel.update({"path": "/", "httponly": True, "samesite": "Strict"})
                headers.add("Set-Cookie", morsel.OutputString())
            # the secret is in the URL: no page sends it on as a Referer
            headers.setdefault("Referrer-Policy", "no-referrer")
            return status_code, headers, chunk

    # DESIGN CHOICE: tornado's routing, not a proxy: distributed serves the dashboard from its
    # scheduler's tornado application, whose first routing rule is now the gate (distributed's
    # RoutingApplication asks its own rules before the Bokeh applications it mounts); the
    # cookie is set by an output transform on each of those applications.
    router = app.default_router
    router.rules.insert(0, router.process_rule(Rule(Refused(), Forbidden)))
    for each in [app, *getattr(app, "applications", [])]:
        if isinstance(each, web.Application):
            each.add_transform(Remembered)
    _SECRETS[cluster] = secret
    return secret


def secret(cluster) -> str | None:
    """The secret of ``cluster``'s gate (:func:`guard`), if any."""
    try:
        return _SECRETS.get(cluster)
    except TypeError:                  # an unhashable object is no cluster guarded here
        return None


def linked(cluster) -> dict:
    """The Dask config under which ``client.dashboard_link`` carries ``cluster``'s secret
    (to enter with ``dask.config.set``); empty when it has none."""
    token = secret(cluster)
    if token is None:
        return {}
    import dask.config          # a search without a store imports no dask (tests/test_startup.py)

    template = str(dask.config.get(LINK_KEY))
    return {LINK_KEY: template + ("&" if "?" in template else "?") + f"token={token}"}
