"""HTTP dates: ``request.http_date`` writes what ``email.utils`` does, and
``request.http_now`` is it of the current second."""

import datetime
import email.utils
import random

from placement.web import request


def test_http_date_is_email_utils():
    rng = random.Random(45)
    for _ in range(2000):
        when = datetime.datetime(1970, 1, 1) + datetime.timedelta(
            seconds=rng.randrange(0, 2**32)
        )
        assert request.http_date(when) == email.utils.format_datetime(
            when.replace(tzinfo=datetime.timezone.utc), usegmt=True
        )


def test_http_now_is_the_current_second(monkeypatch):
    for now in (1_764_498_000.0, 1_764_498_000.999, 1_764_498_001.2, 1_700_000_000.5):
        monkeypatch.setattr(request.time, "time", lambda now=now: now)
        assert request.http_now() == email.utils.formatdate(int(now), usegmt=True)
    # The real clock: what datetime.now gives, within the second.
    monkeypatch.undo()
    before = request.http_now()
    now = request.http_date(
        datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    )
    assert now in (before, request.http_now())
