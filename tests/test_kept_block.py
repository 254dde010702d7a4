"""The coordinator's Gram block kept for the next fit (:mod:`dmcsvm.engine.kept_block`): taken
again when large enough, dropped after its hold or on request, and never a source of values."""

import time

import numpy as np
import pytest
from sklearn.datasets import load_digits

import dmcsvm
from dmcsvm import MulticlassSVC
from dmcsvm.engine import kept_block


@pytest.fixture(autouse=True)
def _nothing_kept():
    kept_block.release_memory()
    yield
    kept_block.release_memory()


def test_a_block_given_back_is_taken_again_when_large_enough_and_of_its_dtype():
    block = kept_block.take(1000, np.float32)
    assert block.shape == (1000,) and block.dtype == np.float32
    kept_block.give(block)
    assert kept_block.kept_bytes() == 4000
    assert kept_block.take(600, np.float32) is block  # smaller: the same block
    assert kept_block.kept_bytes() == 0  # (taken: no longer kept)
    kept_block.give(block)
    bigger = kept_block.take(1001, np.float32)  # too small: a new one, the kept one dropped
    assert bigger is not block and bigger.shape == (1001,) and kept_block.kept_bytes() == 0
    kept_block.give(bigger)
    other = kept_block.take(10, np.float64)
    assert other is not bigger and other.dtype == np.float64
    kept_block.give(block)
    kept_block.give(bigger)  # one block at most: the last given
    assert kept_block.kept_bytes() == bigger.nbytes
    assert dmcsvm.release_memory() == bigger.nbytes
    assert kept_block.kept_bytes() == 0 and dmcsvm.release_memory() == 0


def test_a_kept_block_is_dropped_after_its_hold(monkeypatch):
    monkeypatch.setattr(kept_block, "HOLD_SECONDS", 0.05)
    kept_block.give(np.empty(100, dtype=np.float32))
    assert kept_block.kept_bytes() == 400
    deadline = time.monotonic() + 5.0
    while kept_block.kept_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kept_block.kept_bytes() == 0


def test_a_fit_gives_its_gram_block_back_and_the_next_fit_reads_none_of_its_values():
    """The second fit takes the first fit's block, whatever it holds (NaN here: a value read
    before it is computed would spread), and its model equals a fit on a fresh block bit for
    bit."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    fresh = MulticlassSVC().fit(X[:900], y[:900])
    assert kept_block.kept_bytes() > 0  # (the fit ran in the coordinator's block)
    kept = kept_block.take(1, np.float32)
    kept[:] = np.nan
    kept_block.give(kept)
    taken = []
    real_take = kept_block.take
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kept_block, "take", lambda n, dt: taken.append(real_take(n, dt)) or taken[-1])
        again = MulticlassSVC().fit(X[:900], y[:900])
    assert taken and taken[0] is kept
    np.testing.assert_array_equal(again.dual_coef_, fresh.dual_coef_)
    np.testing.assert_array_equal(again.support_, fresh.support_)
