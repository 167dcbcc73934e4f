"""A bench tool's figures written as one JSON file (``--out``)."""

import json


def write(path, figures):
    """``figures`` as indented JSON at ``path``; nothing without a path."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=1)
            f.write("\n")
