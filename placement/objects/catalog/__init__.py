"""The per-worker provider catalog: providers, their trees, inventories,
traits, aggregates and names, kept in memory and kept current.

Everything but usage and generations changes rarely. ``catalog_changes``
(db/tables.py) counts every committed write that changes what is kept
here, and ``catalog_log`` says what each one changed (this service's
writes log themselves; where the database has the triggers of
db/triggers.py, every writer's rows are logged too, claims included,
which the catalog follows by its counts alone); a request reads the
count (the stamp) in its own transaction and uses the catalog only at the
same stamp. A catalog that is behind is brought up to date by one request
of the worker, in one consistent snapshot: by reading again only what the
log names (the others wait, briefly), or whole when the log cannot tell
(the others read through SQL meanwhile), so answers are the same either
way. It is read first as the worker starts (``refresh.warm``). Users: the
candidate engine's stage 2 (through its index over the catalog,
allocation_candidates/catalog_index.py) and the unfiltered provider
list. See "Provider catalog" in doc/architecture.md.

One job per module, each importing only those before it:

``changes``
    The write side: the kinds of change (the triggers' too), ``record``,
    the log written just before commit (and the watcher that makes an
    unrecorded write of the catalog's tables log EVERYTHING), the stamp.
``rows``
    The value types (``Provider``, ``Inventory``) and the reading of
    providers' rows in one snapshot.
``fingerprint``
    What the catalog holds summed into a few numbers, computed by the
    database in one statement and by a catalog from its maps: a
    difference is another writer's change.
``derived``
    What the candidate engine keeps on a catalog (``Derived``, ``Shapes``).
``maps``
    The provider maps brought up to date by the changed providers' rows.
``store``
    ``Catalog``, the in-memory maps: read whole, or advanced by what the
    log names.
``history``
    Restore detection: the same counts with another history (``diverged``).
``deltas``
    What the log says changed since a catalog's counts (``changed``,
    ``since``); None: read it whole.
``snapshot``
    The one snapshot a catalog is read in.
``host_look``
    The last look of the host's idle followers, shared by its workers.
``host_deltas``
    What one worker of the host read to follow a claim, for the others.
``host_answers``
    The answers one worker of the host rendered at a state, for the
    others (files).
``holder``
    The held catalog and its lock, brought up to date by the log or read
    whole; its fingerprints by counts; the triggers' look.
``verify``
    The comparison with the database's fingerprint (own, or the cloud's
    one: ``currency``), the whole read again on a difference; pruning.
``refresh``
    One ``Cache`` per database: ``current`` for a request; ``warm`` and
    the module's other calls.
"""
