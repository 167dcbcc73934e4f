"""What other projects import to test against placement in-process (nova's
functional tests do): the fixtures of ``placement.tests.fixtures`` and
``placement.tests.functional.fixtures.placement``. This project's own test
suite is the top-level ``tests/`` of its source tree and is not installed.
See doc/testing-with-placement.md."""
