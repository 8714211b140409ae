"""The FastAPI app behind the "GPU fleet" pages, mounted by the Airflow API server (``plugins/``).

Authentication and authorisation are Airflow's own: every route depends on the Core API's
``requires_access_view(AccessView.WEBSITE)``, which reads the JWT from the ``Authorization: Bearer`` header or
the ``_token`` cookie the Airflow UI keeps, exactly as the UI's own routes do, and asks the configured auth
manager whether the user may use the UI (the simple auth manager's viewer role and up; FAB's "Website" view).
The pages are read-only. A browser without a valid token is sent to Airflow's login page; other clients get 401.

Every section degrades to a sentence when its source has nothing yet or cannot be read (``sources``); a route
that serves one file or one rollout answers 404 when it does not exist and 503 when its source is unreachable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import get_user, requires_access_view
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from slicewise.settings import Settings, SettingsError
from slicewise.ui import cost, pages, sources, views
from slicewise.ui.sources import Missing, Unavailable

#: Where the plugin mounts the app (plugins/slicewise_plugin.py repeats it so as not to import this module).
URL_PREFIX = "/slicewise"
#: Served report and plan pages run in a sandbox with an opaque origin: their scripts (plot libraries) run,
#: but cannot read the Airflow session cookie or call the API as the user.
SANDBOX = "sandbox allow-scripts allow-popups allow-downloads"

User = Annotated[BaseUser, Depends(get_user)]
router = APIRouter()


def create_app() -> FastAPI:
    """The app, with Airflow's UI permission required on every route."""
    app = FastAPI(
        title="Slicewise GPU fleet",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(requires_access_view(AccessView.WEBSITE))],
    )
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(SettingsError, _settings_error)
    app.include_router(router)
    return app


# -- helpers ----------------------------------------------------------------------------------------------------


def _base(request: Request) -> str:
    """The app's root path with a trailing slash (the mount point, behind any API root path)."""
    return str(request.scope.get("root_path", "")).rstrip("/") + "/"


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


@dataclass(frozen=True)
class _Page:
    """What every page shows around its content: navigation, the user, the settings it was read with."""

    request: Request
    user: BaseUser | None
    title: str
    active: str = ""  # the nav entry to highlight
    settings: Settings | None = None
    notes: tuple[str, ...] = ()

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = pages.render(
            template,
            title=self.title,
            base=_base(self.request),
            active=self.active,
            user=self.user.get_name() if self.user is not None else "",
            facts=sources.settings_facts(self.settings) if self.settings is not None else {},
            settings_notes=list(self.notes),
            now=datetime.now(UTC),
            **context,
        )
        # The pages show live state: never serve them from a cache.
        return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})

    def message(self, text: str, status_code: int) -> HTMLResponse:
        return self.render("message.html", status_code, message=text)


def _page(request: Request, user: BaseUser, title: str, active: str) -> tuple[_Page, Settings]:
    """The page frame with the settings read for this request (SettingsError goes to ``_settings_error``)."""
    settings, notes = sources.ui_settings()
    return _Page(request, user, title, active, settings, tuple(notes)), settings


def _status(problem: Unavailable) -> int:
    return 404 if isinstance(problem, Missing) else 503


def _file(content: bytes, media_type: str) -> Response:
    headers = {"Cache-Control": "no-store"}
    if media_type.startswith("text/html"):
        headers["Content-Security-Policy"] = SANDBOX
    return Response(content, media_type=media_type, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    """In a browser: no valid token (401, or Airflow's 403 for an invalid one) goes to Airflow's login page and
    back here; a user without the permission (403) and unknown paths (404) get a short page. Anything else,
    and every non-browser client: the JSON error the Airflow API gives."""
    assert isinstance(exc, StarletteHTTPException)
    if _wants_html(request):
        if exc.status_code == 401 or (exc.status_code == 403 and exc.detail == "Invalid JWT token"):
            return RedirectResponse(
                get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303
            )
        if exc.status_code == 403:
            text = "You are signed in to Airflow, but your role may not view the Airflow UI's pages."
            return _Page(request, None, "Forbidden").message(text, 403)
        if exc.status_code == 404:
            return _Page(request, None, "Not found").message("There is no such page.", 404)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _settings_error(request: Request, exc: Exception) -> Response:
    """Invalid ``SLICEWISE_*`` env or defaults: every page says so instead of failing with a trace."""
    text = f"The Slicewise settings of the API server are invalid: {exc}"
    if _wants_html(request):
        return _Page(request, None, "Settings").message(text, 500)
    return JSONResponse({"detail": text}, status_code=500)


# -- the cost report --------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def latest_report(request: Request, user: User) -> Response:
    """The newest cost report."""
    return _cost_page(request, user, None)


@router.get("/reports/{date}", response_class=HTMLResponse)
def report(request: Request, user: User, date: str) -> Response:
    """The cost report of ``date`` (YYYY-MM-DD)."""
    return _cost_page(request, user, date)


def _cost_page(request: Request, user: BaseUser, date: str | None) -> Response:
    page, settings = _page(request, user, "GPU cost report", "./")
    dates: list[str] = []
    try:
        root = sources.storage_root(settings)
        dates = sources.report_dates(root)
        if date is None and not dates:
            raise Missing(
                f"No cost report yet: gpu_cost_report publishes one each day under {settings.storage_root}"
                "/reports/<date>/."
            )
        shown = date or dates[0]
        view = sources.shaped(
            f"the summary of {shown}", cost.cost_view, sources.read_summary(root, shown), shown
        )
    except Unavailable as problem:
        # No report at all is the normal state of a new install; a named date that is missing is a 404.
        status = 200 if date is None else _status(problem)
        return page.render("cost.html", status, problem=str(problem), dates=dates)
    has_html = sources.has_report_file(root, shown, "report.html")
    return replace(page, title=f"{page.title}: {view.date}").render(
        "cost.html",
        problem=None,
        view=view,
        date=shown,
        dates=dates,
        report_problem=None if has_html else f"The report of {shown} has no report.html.",
    )


@router.get("/reports/{date}/{name}")
def report_file(request: Request, user: User, date: str, name: str) -> Response:
    """``report.html`` (sandboxed), ``allocation.csv`` or ``summary.json`` of the report of ``date``."""
    page, settings = _page(request, user, "Report file", "./")
    try:
        content = sources.report_file(sources.storage_root(settings), date, name)
    except Unavailable as problem:
        return page.message(str(problem), _status(problem))
    return _file(content, sources.REPORT_FILES[name])


# -- the fleet --------------------------------------------------------------------------------------------------


@router.get("/fleet", response_class=HTMLResponse)
def fleet(request: Request, user: User) -> Response:
    """Managed nodes: GPU model, layout, last change, dwell."""
    page, settings = _page(request, user, "GPU fleet", "fleet")
    common: dict[str, Any] = {
        "backend": settings.cluster_backend,
        "dwell_hours": f"{settings.planner_dwell_hours:g}",
    }
    try:
        nodes = sources.cluster_nodes(settings)
    except Unavailable as problem:
        return page.render("fleet.html", problem=str(problem), **common)
    changes: dict[str, datetime | None] | None
    try:
        changes, ledger_problem = sources.last_changes(settings, [n.name for n in nodes]), None
    except Missing as problem:  # no rollout yet: no node was ever changed by one
        changes, ledger_problem = {}, str(problem)
    except Unavailable as problem:  # unknown: the table says "?"
        changes, ledger_problem = None, str(problem)
    return page.render(
        "fleet.html",
        problem=None,
        nodes=len(nodes),
        ledger_problem=ledger_problem,
        models=views.model_counts(nodes),
        fleet=views.fleet_table(nodes, changes, settings.planner_dwell_hours, datetime.now(UTC)),
        **common,
    )


# -- plan and rollouts ------------------------------------------------------------------------------------------


@router.get("/plan", response_class=HTMLResponse)
def plan(request: Request, user: User) -> Response:
    """The latest plan, the recent rollouts and the recent changes outside their waves."""
    page, settings = _page(request, user, "Plan and rollouts", "plan")
    context: dict[str, Any] = {"plan_problem": None, "rollouts_problem": None, "marks_problem": None}
    try:
        latest = sources.latest_plan(sources.storage_root(settings))
        context.update(latest=latest, plan=views.plan_view(latest.plan))
    except Unavailable as problem:
        context["plan_problem"] = str(problem)
    try:
        context["rollouts"] = views.rollouts_table(sources.recent_rollouts(settings))
    except Unavailable as problem:
        context["rollouts_problem"] = str(problem)
    try:
        context["marks"] = views.marks_table(sources.recent_marks(settings))
    except Unavailable as problem:
        context["marks_problem"] = str(problem)
    return page.render("plan.html", **context)


@router.get("/plan.html")
def plan_html(request: Request, user: User) -> Response:
    """The latest plan's own page (sandboxed)."""
    page, settings = _page(request, user, "Plan", "plan")
    try:
        content = sources.latest_plan_html(sources.storage_root(settings))
    except Unavailable as problem:
        return page.message(str(problem), _status(problem))
    return _file(content, "text/html; charset=utf-8")


# -- the what-if review -----------------------------------------------------------------------------------------


@router.get("/whatif", response_class=HTMLResponse)
def whatif(request: Request, user: User) -> Response:
    """The newest what-if review: the week replayed under each policy, and the consolidation choice."""
    page, settings = _page(request, user, "What-if review", "whatif")
    try:
        latest = sources.latest_review(sources.storage_root(settings))
        view = sources.shaped(f"the what-if review {latest.name}", views.review_view, latest.summary)
    except Unavailable as problem:
        return page.render("whatif.html", problem=str(problem))
    return page.render("whatif.html", problem=None, latest=latest, view=view)


@router.get("/whatif/{name}/report.html")
def whatif_html(request: Request, user: User, name: str) -> Response:
    """A what-if review's own report (sandboxed)."""
    page, settings = _page(request, user, "What-if report", "whatif")
    try:
        content = sources.review_html(sources.storage_root(settings), name)
    except Unavailable as problem:
        return page.message(str(problem), _status(problem))
    return _file(content, "text/html; charset=utf-8")


@router.get("/rollouts/{rollout_id:int}", response_class=HTMLResponse)
def rollout(request: Request, user: User, rollout_id: int) -> Response:
    """One rollout from the ledger: waves, nodes, measurements and its story."""
    page, settings = _page(request, user, f"Rollout #{rollout_id}", "plan")
    try:
        detail = sources.rollout_detail(settings, rollout_id)
    except Unavailable as problem:
        return page.render("rollout.html", _status(problem), problem=str(problem))
    return page.render(
        "rollout.html",
        problem=None,
        rollout=detail.rollout,
        story=detail.story,
        waves=views.waves_table(detail.waves),
        nodes=views.rollout_nodes_table(detail.nodes),
        measurements=views.measurements_table(detail.measurements),
    )
