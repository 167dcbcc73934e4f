"""The request routers are compiled as the app is built (in placement-api's
master, before the fork), not by each worker's first request."""

from placement.api import app as api_app
from placement.api import metrics


def _compiled(router):
    # falcon's CompiledRouter finds through _compile_and_find until it
    # has compiled its routes.
    return router._find != router._compile_and_find


def test_falcon_app_router_compiled_when_built():
    assert _compiled(api_app.create_falcon_app()._router)


def test_metrics_route_templates_compiled_when_built():
    templates = metrics.RouteTemplates()
    assert _compiled(templates.router)
    assert templates.template("/resource_providers/abc") == (
        "/resource_providers/{uuid}"
    )
