"""``[api] auth_strategy = keystone``: keystonemiddleware's auth_token,
configured from ``[keystone_authtoken]``, in front of everything but the
version document (``/`` and the empty path of a prefix mount)."""

from typing import Any

from keystonemiddleware import auth_token
from oslo_config import cfg

OPEN_PATHS = ("/", "")


class _OpenRoot:
    """Sends the version document around authentication."""

    def __init__(self, app, authenticated):
        self.app = app
        self.authenticated = authenticated

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "") in OPEN_PATHS:
            return self.app(environ, start_response)
        return self.authenticated(environ, start_response)


def wrap(app: Any, conf: cfg.ConfigOpts) -> Any:
    # auth_token reads its options from our ConfigOpts (and registers them
    # there), so placement.conf or OS_KEYSTONE_AUTHTOKEN__* set them.
    auth = auth_token.AuthProtocol(app, {"oslo_config_config": conf})
    return _OpenRoot(app, auth)
