"""CORS (oslo.middleware) from ``[cors]``; only in the pipeline when
``allowed_origin`` is set. Placement's header/method defaults are set on
the app's ConfigOpts by ``placement.conf.register_opts``."""

from typing import Any

from oslo_config import cfg
from oslo_middleware import cors


def wrap(app: Any, conf: cfg.ConfigOpts) -> Any:
    return cors.CORS(app, conf)
