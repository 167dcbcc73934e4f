"""WSGI entry points: ``placement.wsgi:application`` (alias ``app``) and
``placement.wsgi.api:application``. Any WSGI server can load them."""

from placement.wsgi.api import application  # noqa: F401

app = application
