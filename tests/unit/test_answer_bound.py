"""The answer bound ([placement] max_answer_candidates): an answer is
refused before it is sent once it would hold more candidates than the
bound; up to KEPT candidates are kept, a larger answer is counted by a
search that builds none unless its plans show it cannot pass the bound,
and goes on from the kept candidates: nothing is searched twice to be
sent."""

import pytest

from placement import exception
from placement.objects.allocation_candidates import answering as engine


class Seen:
    """What a search's plans say of its size: ``most()``."""

    def __init__(self, most):
        self._most = most

    def most(self):
        return self._most


def searches(count, most=None):
    """A search function giving ``count`` candidates (at most ``most`` by
    its plans; None: unknown), and the list of the iterators it handed out
    (how many searches ran, how far each went)."""
    runs = []
    seen = Seen(most)

    def search_(build=True):
        run = {"taken": 0, "build": build}
        runs.append(run)

        def candidates():
            for n in range(count):
                run["taken"] += 1
                yield n if build else None

        return candidates(), seen, "class ids", False

    return search_, runs


@pytest.mark.parametrize("count", [0, 1, engine.KEPT - 1, engine.KEPT])
def test_small_answers_are_searched_once(count):
    search_, runs = searches(count)
    found, seen, *rest = engine._bounded(search_, engine.KEPT * 3)
    assert list(found) == list(range(count))
    assert isinstance(seen, Seen)
    assert rest == ["class ids", False]
    assert len(runs) == 1


@pytest.mark.parametrize("most", [None, engine.KEPT * 3 + 1])
@pytest.mark.parametrize("count", [engine.KEPT + 1, engine.KEPT * 3])
def test_answers_past_kept_are_counted_then_go_on(count, most):
    """Unknown or over the bound by the plans: counted by a walk that
    builds none, then the first search goes on past the kept ones."""
    search_, runs = searches(count, most)
    found, *_ = engine._bounded(search_, engine.KEPT * 3)
    assert list(found) == list(range(count))
    assert [run["build"] for run in runs] == [True, False]
    assert [run["taken"] for run in runs] == [count, count]


@pytest.mark.parametrize("count", [engine.KEPT + 1, engine.KEPT * 3])
def test_answers_within_the_bound_by_their_plans_are_not_counted(count):
    search_, runs = searches(count, most=engine.KEPT * 3)
    found, *_ = engine._bounded(search_, engine.KEPT * 3)
    assert list(found) == list(range(count))
    assert [run["build"] for run in runs] == [True]
    assert runs[0]["taken"] == count


def test_plans_over_the_bound_with_fewer_candidates_are_answered():
    """The plans' bound ignores the constraints between slots: past the
    bound by it, the count decides."""
    search_, runs = searches(engine.KEPT * 2, most=10**9)
    found, *_ = engine._bounded(search_, engine.KEPT * 3)
    assert sum(1 for _ in found) == engine.KEPT * 2
    assert [run["build"] for run in runs] == [True, False]


@pytest.mark.parametrize("bound", [5, engine.KEPT - 1, engine.KEPT, engine.KEPT * 3])
def test_one_past_the_bound_is_refused_after_counting_one_past(bound):
    search_, runs = searches(bound * 10)
    with pytest.raises(exception.AnswerTooLarge) as raised:
        engine._bounded(search_, bound)
    assert "more than %d allocation candidates" % bound in raised.value.message
    assert raised.value.status == 400
    # Kept up to KEPT + 1, then counted afresh without building.
    if bound <= engine.KEPT:
        assert [run["taken"] for run in runs] == [bound + 1]
    else:
        assert [run["taken"] for run in runs] == [engine.KEPT + 1, bound + 1]
        assert runs[1]["build"] is False


@pytest.mark.parametrize("bound", [5, engine.KEPT, engine.KEPT * 3])
def test_exactly_the_bound_is_answered(bound):
    search_, _ = searches(bound)
    found, *_ = engine._bounded(search_, bound)
    assert sum(1 for _ in found) == bound


def test_no_bound_takes_the_search_as_it_is():
    search_, runs = searches(engine.KEPT * 2)
    found, *_ = engine._bounded(search_, 0)
    assert runs[0]["taken"] == 0  # nothing pulled before sending
    assert sum(1 for _ in found) == engine.KEPT * 2
