"""Console scripts: placement-api, placement-manage, placement-status;
and what only placement-api's workers run: the gunicorn worker
(``worker``), the gate on requests at once (``gate``) and the catalog
follower (``follower``)."""
