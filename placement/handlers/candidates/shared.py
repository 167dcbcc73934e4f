"""GET /allocation_candidates answered by a host's workers together
(objects/catalog/host_answers): the body one worker rendered for a
question at a database state is sent by another asked the same question
whose own look for its request finds that state, without a search.

A question is the microversion, the query's (name, value) pairs in their
order and the engine's options. Only answers that are the same for every
request of a question at a state are shared: the engine's Streams
(``engine.answer``'s ``search`` False: without a limit, not randomized)
in the id order; and only from a catalog that holds usage (the
triggers log every writer's writes, so the state moves with each).
"""

import contextlib
from collections.abc import Iterator

import falcon

from placement.db import api as db_api
from placement.objects import allocation_candidates as engine
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.catalog import host_answers
from placement.objects.catalog import refresh
from placement.web import request as request_

Known = host_answers.Known


class Question:
    """One request's question: ``search`` for ``candidate_query.run``,
    then ``kept`` around the rendering of the Stream it gave."""

    def __init__(self, req: falcon.Request) -> None:
        self._req = req
        self._store: host_answers.HostAnswers | None = None
        self._key = b""
        self._state = ""

    def search(
        self, db: db_api.Database, request: ac_request.Request, options: engine.Options
    ) -> "engine.Result | engine.Stream | Known":
        """``engine.answer``, or the answer another worker of the host
        kept for this question at the state this request's look found."""
        store = refresh.shared_answers(db)
        if store is None or options.order != "id":
            return engine.answer(db, request, options)
        floor = store.floor()  # before the look
        stream = engine.answer(db, request, options, search=False)
        if stream is None:  # not a Stream: not the same for every request
            return engine.answer(db, request, options)
        shared = None
        # The Stream's connection is given back on every way out but the
        # Stream's own (an error of the store's too).
        with contextlib.ExitStack() as held:
            held.enter_context(stream)
            found = stream.state()
            if found is not None:  # the catalog's alone
                asked = (
                    str(self._req.context.version),
                    request_.query_pairs(self._req),
                )
                self._key = repr((*asked, options)).encode()
                self._state = store.state(found, floor)
                known = store.get(self._key, self._state)
                if known is not None:
                    return known
                shared = store
            stream.start()
            held.pop_all()
        self._store = shared
        return stream

    def kept(self, stream: engine.Stream, body: Iterator[bytes]) -> Iterator[bytes]:
        """``body`` (the Stream's rendered pieces), offered to the host's
        other workers once it is all out, when it can be shared."""
        store = self._store
        if store is None:
            yield from body
            return
        pieces: list[bytes] | None = []
        size = 0
        for piece in body:
            if pieces is not None:
                pieces.append(piece)
                size += len(piece)
                if size > host_answers.ENTRY_BYTES:
                    pieces = None
            yield piece
        # Not if a name was read through SQL.
        if pieces is not None and stream.state() is not None:
            store.put(self._key, self._state, b"".join(pieces), stream.count)
