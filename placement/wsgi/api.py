"""The WSGI callable, built on first import from the configuration.

Configuration: ``$OS_PLACEMENT_CONFIG_DIR/placement.conf`` when that
variable is set, else oslo.config's default files for project placement
(``/etc/placement/placement.conf``, ...), plus ``OS_<GROUP>__<OPTION>``
environment variables. Fails hard without [placement_database] connection.
"""

from placement import deploy

application = deploy.loadapp()
