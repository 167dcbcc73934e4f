"""GET / : the version document."""

from placement import versions
from placement.web import request

# The same for every request: encoded once.
DOCUMENT = request.dumps(
    {
        "versions": [
            {
                "id": "v%s" % versions.MIN,
                "max_version": str(versions.MAX),
                "min_version": str(versions.MIN),
                "status": "CURRENT",
                "links": [{"rel": "self", "href": ""}],
            }
        ]
    }
)


def home(req, resp):
    request.render(resp, DOCUMENT)
    request.set_last_modified(req, resp, None, always=True)
