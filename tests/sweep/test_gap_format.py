"""The capacity gap printout gives mean counts as short numbers."""

from sim.sweep.gap import _count


def test_mean_counts_print_short_and_whole_counts_bare():
    assert _count(2 / 3) == "0.667"
    assert _count(3.0) == "3"
    assert _count(5) == "5"
    assert _count(None) == "None"
