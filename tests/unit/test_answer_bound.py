"""The answer bound ([placement] max_answer_candidates): an answer is
refused before it is sent once it would hold more candidates than the
bound; up to KEPT candidates are kept, a larger answer is counted by a
search that builds none and then searched again."""

import pytest

from placement import exception
from placement.objects import allocation_candidates as engine


def searches(count):
    """A search function giving ``count`` candidates, and the list of the
    iterators it handed out (how many searches ran, how far each went)."""
    runs = []

    def search_(build=True):
        run = {"taken": 0, "build": build}
        runs.append(run)

        def candidates():
            for n in range(count):
                run["taken"] += 1
                yield n if build else None

        return candidates(), "seen", "class ids", False

    return search_, runs


@pytest.mark.parametrize("count", [0, 1, engine.KEPT - 1, engine.KEPT])
def test_small_answers_are_searched_once(count):
    search_, runs = searches(count)
    found, *rest = engine._bounded(search_, engine.KEPT * 3)
    assert list(found) == list(range(count))
    assert rest == ["seen", "class ids", False]
    assert len(runs) == 1


@pytest.mark.parametrize("count", [engine.KEPT + 1, engine.KEPT * 3])
def test_answers_past_kept_are_counted_then_searched_again(count):
    search_, runs = searches(count)
    found, *_ = engine._bounded(search_, engine.KEPT * 3)
    assert list(found) == list(range(count))
    assert [run["build"] for run in runs] == [True, False, True]
    assert runs[1]["taken"] == count


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
