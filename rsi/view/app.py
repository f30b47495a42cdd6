"""The viewer's FastAPI app: server-rendered pages over a read-only workspace; the URL holds all state.

Pages: /generations (lineage, gates, rates chart), /jobs, /trials (filters, sort, keyset pages, full-text
search; `counted=gen:<id>|arm:<id>|ctl:<agent>` with `part` (a task set, or a holdout part: in_skill | unseen |
no_forgetting): exactly the trials a compare cell counted), /trials/{id} (every step in full; j/k between steps,
n/p between trials), /compare (task x generation grid: each generation's model arms under its own config, the
promote gate's figure, per holdout part too, controls in their own columns; or task x arm) and /compare/steps (a
step-aligned diff of two trajectories), /diff (the diff report, rendered from the same templates as
`rsi diff --format html`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape

from rsi.core.errors import NotFoundError, RsiError
from rsi.store.queries_view import FILTERS, OUTCOMES, SORTS
from rsi.store.search_index import SearchIndex
from rsi.view import pages
from rsi.view.context import ViewContext

RESYNC_SEC = 30.0
FACETS_SEC = 10.0
ERROR_TYPES = ("agent_timeout", "agent_error", "agent_broke_sandbox", "verifier_error", "verifier_timeout",
               "tamper", "sandbox_error", "endpoint_error", "build_error")


def environment() -> Environment:
    """The viewer's templates first, then the report's (the Diff page includes the report's own body)."""
    env = Environment(loader=ChoiceLoader([PackageLoader("rsi.view", "templates"),
                                           PackageLoader("rsi.report", "templates")]),
                      autoescape=select_autoescape(["html", "j2"]))
    env.globals.update(pct=_pct, short=_short, qs=_qs)
    env.filters["mark"] = _mark
    return env


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _short(x: str | None, n: int = 12) -> str:
    return "" if not x else (x if len(x) <= n else x[:n])


def _qs(params: dict[str, Any], **change: Any) -> str:
    """`params` with `change` applied (None drops a key), as a query string with a leading '?'."""
    merged = {**params, **change}
    items = [(k, v) for k, v in merged.items() if v not in (None, "")]
    return "?" + urlencode(items) if items else ""


def _mark(snippet: str) -> Any:
    from markupsafe import Markup, escape

    return Markup(str(escape(snippet)).replace("\x02", "<mark>").replace("\x03", "</mark>"))


def _error_types(ctx: ViewContext) -> list[str]:
    try:
        from rsi.core.trial import ErrorType

        return sorted(e.value for e in ErrorType)
    except ImportError:  # pragma: no cover
        return list(ERROR_TYPES)


def _open_index(ctx: ViewContext, path: Path | None) -> SearchIndex:
    """The search index: `path`, else the workspace's `.rsi/cache/`, else (a workspace we may not write) rsi's
    user cache dir, one file per workspace."""
    if path is not None:
        return SearchIndex(path)
    try:
        return SearchIndex(ctx.ws.state_dir / "cache" / "trajectory-search.db")
    except Exception:  # noqa: BLE001 - not writable, or not a database there: index in the user's cache
        import hashlib

        from rsi.store.paths import cache_dir

        key = hashlib.sha256(str(ctx.ws.root.resolve()).encode()).hexdigest()[:16]
        return SearchIndex(cache_dir() / "view" / f"trajectory-search-{key}.db")


def create_app(ctx: ViewContext, *, index_path: Path | None = None) -> FastAPI:
    """The app over one opened workspace; `index_path`: where the trajectory search index lives."""
    from rsi.core.integrity import LEVELS

    env = environment()
    index = _open_index(ctx, index_path)
    chart_cache: dict[str, str | None] = {}
    facet_cache: dict[str, Any] = {"at": -FACETS_SEC, "value": {}}

    def facets() -> dict[str, list[str]]:
        """The filters' choices, re-read at most every FACETS_SEC (they change when a job adds an arm)."""
        if time.monotonic() - facet_cache["at"] > FACETS_SEC:
            facet_cache.update(at=time.monotonic(), value=ctx.store.facets())
        return dict(facet_cache["value"])

    def sync_index() -> None:
        index.sync(ctx.store.trial_dirs(limit=10**9), lambda d: ctx.ws.resolve(d))

    def resync_later() -> None:
        if not index.syncing and time.monotonic() - index.last_sync > RESYNC_SEC:
            threading.Thread(target=sync_index, name="rsi-view-index", daemon=True).start()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=sync_index, name="rsi-view-index", daemon=True).start()  # index in the background
        yield

    app = FastAPI(title="rsi view", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.ctx, app.state.index = ctx, index

    def render(name: str, request: Request, status: int = 200, **kw: Any) -> HTMLResponse:
        params = dict(request.query_params)
        body = env.get_template(name).render(request=request, params=params, path=request.url.path,
                                             workspace=str(ctx.ws.root), **kw)
        return HTMLResponse(body, status_code=status)

    @app.exception_handler(NotFoundError)
    def _not_found(request: Request, exc: NotFoundError) -> HTMLResponse:
        return render("error.html.j2", request, 404, title="not found", message=str(exc))

    @app.exception_handler(ValueError)
    def _bad(request: Request, exc: ValueError) -> HTMLResponse:
        return render("error.html.j2", request, 400, title="bad request", message=str(exc))

    @app.exception_handler(RsiError)
    def _rsi(request: Request, exc: RsiError) -> HTMLResponse:
        return render("error.html.j2", request, 400, title="error", message=str(exc))

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/generations")

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/generations", response_class=HTMLResponse)
    def generations(request: Request) -> HTMLResponse:
        data = pages.generations(ctx)
        series = {g: {k: r[k] for k in ("in_skill", "unseen", "no_forgetting", "suite", "in_template")}
                  for g, r in data["rates"].items()}
        key = repr(sorted(series.items()))
        if key not in chart_cache:
            from rsi.report.cycles_html import PART_SERIES, chart

            chart_cache.clear()
            chart_cache[key] = chart(series, PART_SERIES) if series else None
        return render("generations.html.j2", request, chart=chart_cache[key], **data)

    @app.get("/jobs", response_class=HTMLResponse)
    def jobs(request: Request) -> HTMLResponse:
        kind = request.query_params.get("kind") or None
        rows = ctx.store.job_overview()
        kinds = sorted({j["kind"] for j in rows})
        if kind:
            rows = [j for j in rows if j["kind"] == kind]
        return render("jobs.html.j2", request, jobs=rows, kinds=kinds, kind=kind)

    @app.get("/trials", response_class=HTMLResponse)
    def trials(request: Request) -> HTMLResponse:
        params = dict(request.query_params)
        text = (params.get("q") or "").strip()
        snippets: dict[str, str] = {}
        if text:
            if index.last_sync == 0.0:
                sync_index()  # first search: index now (a no-op while the startup thread holds the index)
            else:
                resync_later()
            snippets = index.search(text)
        ids, counted = pages.counted_ids(ctx, params, tuple(snippets) if text else None)
        q = pages.trial_query(params, ids)
        page = ctx.store.trial_page(q)
        state = {k: v for k, v in params.items() if k not in ("after", "before")}
        return render("trials.html.j2", request, page=page, query=q, state=state, snippets=snippets, text=text,
                      counted=counted,
                      facets=facets(), outcomes=OUTCOMES, error_types=_error_types(ctx),
                      integrity_levels=[*LEVELS], sorts=list(SORTS), filters=FILTERS,
                      indexed=index.indexed() if text else None,
                      total=ctx.store.trial_total() if text else None)

    @app.get("/trials/{trial_id}", response_class=HTMLResponse)
    def trial(request: Request, trial_id: str) -> HTMLResponse:
        detail = pages.trial_detail(ctx, trial_id)
        params = dict(request.query_params)
        text = (params.get("q") or "").strip()
        ids, _ = pages.counted_ids(ctx, params, tuple(index.search(text)) if text else None)
        q = pages.trial_query(params, ids)
        prev_id, next_id = ctx.store.trial_neighbours(q, detail.row.id)
        state = {k: v for k, v in params.items() if k not in ("after", "before")}
        return render("trial.html.j2", request, d=detail, t=detail.row, prev_id=prev_id, next_id=next_id,
                      state=state)

    @app.get("/compare", response_class=HTMLResponse)
    def compare(request: Request) -> HTMLResponse:
        p = request.query_params
        by = p.get("by") or "generation"
        split = p.get("split") if "split" in p else "holdout"
        data = pages.compare_grid(ctx, by, split or None, p.get("family") or None, p.getlist("col"))
        cols = data["cols"]
        a = p.get("a") or (cols[0] if cols else "")
        b = p.get("b") or (cols[1] if len(cols) > 1 else a)
        return render("compare.html.j2", request, split=split, family=p.get("family") or "", a=a, b=b,
                      facets=facets(), **data)

    @app.get("/compare/steps", response_class=HTMLResponse)
    def compare_steps(request: Request) -> HTMLResponse:
        p = request.query_params
        task, a, b = p.get("task"), p.get("a"), p.get("b")
        if not (task and a and b):
            raise ValueError("give task, a and b (e.g. /compare/steps?task=NAME&a=gen-0000&b=gen-0001)")
        data = pages.step_diff(ctx, task, a, b, p.get("by") or "generation", p.get("ta"), p.get("tb"),
                               p.get("split") if "split" in p else "holdout")
        return render("steps.html.j2", request, **data)

    @app.get("/diff", response_class=HTMLResponse)
    def diff(request: Request) -> HTMLResponse:
        from rsi.report.diff import build_diff
        from rsi.report.diff_html import report_context

        p = request.query_params
        qa, qb = p.get("a"), p.get("b")
        pair = (qa, qb) if qa and qb else pages.default_pair(ctx)
        gens = [g.id for g in ctx.store.list_generations()]
        if pair is None:
            return render("diff.view.html.j2", request, r=None, gens=gens, a="", b="")
        report = build_diff(ctx, pair[0], pair[1], agent=p.get("agent") or None)  # None: every model arm
        rc = report_context(report, trial_href=lambda t: f"/trials/{t['id']}")
        a, b = report.a, report.b

        def steps_href(t: dict[str, Any]) -> str:
            return "/compare/steps" + _qs({"task": t["task"], "a": a, "b": b})

        return render("diff.view.html.j2", request, gens=gens, a=a, b=b, steps_href=steps_href, **rc)

    return app


__all__ = ["create_app", "environment"]
