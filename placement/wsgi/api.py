"""The WSGI callable, built on first import from the configuration."""
from placement import deploy

application = deploy.loadapp()
