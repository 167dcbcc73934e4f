"""GET / : the version document."""

from placement.api import microversion
from placement.api import request


def home(req, resp):
    request.render(
        resp,
        {
            "versions": [
                {
                    "id": "v%s" % microversion.MIN_VERSION,
                    "max_version": str(microversion.MAX_VERSION),
                    "min_version": str(microversion.MIN_VERSION),
                    "status": "CURRENT",
                    "links": [{"rel": "self", "href": ""}],
                }
            ]
        },
    )
    request.set_last_modified(req, resp, None, always=True)
