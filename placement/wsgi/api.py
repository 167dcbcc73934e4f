"""The WSGI callable, built on first import from the configuration.

Configuration: ``$OS_PLACEMENT_CONFIG_DIR/placement.conf`` when that
variable is set, else oslo.config's default files for project placement
(``/etc/placement/placement.conf``, ...), plus ``OS_<GROUP>__<OPTION>``
environment variables. Fails hard without [placement_database] connection.
"""

from placement import conf as placement_conf
from placement import deploy

# This entry point's configuration (its own, not oslo.config's global).
CONF = placement_conf.command_conf()
application = deploy.loadapp(CONF)
