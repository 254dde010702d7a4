"""Round messages and replies: every reply field declares its merge rule, the one merge combines
partition replies as the rules say, and every message type survives the wire form."""

from dataclasses import fields

import numpy as np
import pytest
import scipy.sparse as sp

from dmcsvm.engine import messages as m

REPLY_TYPES = (m.Reply, m.CSReply, m.GradientReply)
MESSAGE_TYPES = tuple(m.MESSAGE_TYPES.values())
RULES = {m.CONCAT, m.SUM, m.MAX, m.MIN, m.FIRST, m.LIST}


@pytest.mark.parametrize("cls", REPLY_TYPES, ids=lambda c: c.__name__)
def test_every_reply_field_declares_a_merge_rule(cls):
    missing = [f.name for f in fields(cls) if f.metadata.get(m.MERGE) not in RULES]
    assert not missing, f"{cls.__name__} fields without a merge rule: {missing}"


def _cs_reply(rng, part, nc, P, d, weighted):
    new = rng.random(nc) < 0.5
    return m.CSReply(
        part=part,
        cand_ids=rng.integers(0, 100, nc),
        cand_V=rng.random(nc),
        cand_psi=rng.random(nc),
        cand_F=rng.random((nc, P)),
        cand_X=rng.random((int(new.sum()), d)),
        cand_new=new,
        cand_kdiag=rng.random(nc),
        cand_yp=rng.integers(0, P, nc),
        cand_cls=rng.integers(0, P, nc),
        cand_C=rng.random(nc) if weighted else None,
        max_V=rng.random(),
        sum_V=rng.random(),
        max_psi=rng.random(),
        n_viol=int(rng.integers(0, 9)),
        n_active=int(rng.integers(9, 20)),
        n_rows=20,
        sum_alpha=rng.random(),
        sum_BF=rng.random(),
        sum_xi=rng.random(),
        sum_Cxi=rng.random() if weighted else None,
        rows_computed=int(rng.integers(0, 50)),
        rows_cached=int(rng.integers(0, 50)),
        rows_disk=int(rng.integers(0, 50)),
        t_kernel=rng.random(),
        t_update=rng.random(),
        t_select=rng.random(),
        t_total=rng.random(),
    )


@pytest.mark.parametrize("weighted", [False, True])
def test_merge_of_crammer_singer_replies(weighted):
    rng = np.random.default_rng(0)
    a, b = _cs_reply(rng, 0, 5, 3, 4, weighted), _cs_reply(rng, 1, 7, 3, 4, weighted)
    out = m.merge([a, b])
    assert type(out) is m.CSReply and out.part == [0, 1]
    for k in (
        "cand_ids",
        "cand_V",
        "cand_psi",
        "cand_F",
        "cand_X",
        "cand_new",
        "cand_kdiag",
        "cand_yp",
        "cand_cls",
    ):
        np.testing.assert_array_equal(
            getattr(out, k), np.concatenate([getattr(a, k), getattr(b, k)])
        )
    for k in (
        "sum_V",
        "n_viol",
        "n_active",
        "n_rows",
        "sum_alpha",
        "sum_BF",
        "sum_xi",
        "rows_computed",
        "rows_cached",
        "rows_disk",
    ):
        assert getattr(out, k) == getattr(a, k) + getattr(b, k)
    for k in ("max_V", "max_psi", "t_kernel", "t_update", "t_select", "t_total"):
        assert getattr(out, k) == max(getattr(a, k), getattr(b, k))
    if weighted:
        np.testing.assert_array_equal(out.cand_C, np.concatenate([a.cand_C, b.cand_C]))
        assert out.sum_Cxi == a.sum_Cxi + b.sum_Cxi
    else:
        assert out.cand_C is None and out.sum_Cxi is None
    # every candidate's X row: its own row of cand_X when new, else -1 (the coordinator's bank)
    xrow = out.cand_xrow()
    new = out.cand_new
    np.testing.assert_array_equal(xrow[~new], -1)
    np.testing.assert_array_equal(xrow[new], np.arange(int(new.sum())))


def test_merge_of_gradient_replies_and_sparse_rows():
    rng = np.random.default_rng(1)

    def reply(part, nc, weighted=True):
        return m.GradientReply(
            part=part,
            cand_ids=rng.integers(0, 50, nc),
            cand_g=rng.random(nc),
            cand_vup=rng.random(nc),
            cand_vlow=rng.random(nc),
            cand_grp=rng.integers(0, 3, nc),
            cand_y=np.sign(rng.random(nc) - 0.5),
            cand_X=sp.random(nc, 6, 0.3, format="csr", random_state=part),
            cand_U=rng.random(nc),
            gmax=rng.random(3),
            gmin=rng.random(3),
            obj2=rng.random(),
            rows_computed=3,
            rows_cached=4,
            t_total=rng.random(),
        )

    a, b = reply(0, 4), reply(1, 6)
    out = m.merge([a, b])
    np.testing.assert_array_equal(out.gmax, np.maximum(a.gmax, b.gmax))
    np.testing.assert_array_equal(out.gmin, np.minimum(a.gmin, b.gmin))
    assert out.obj2 == a.obj2 + b.obj2 and out.rows_computed == 6 and out.rows_cached == 8
    assert out.t_total == max(a.t_total, b.t_total)
    assert sp.issparse(out.cand_X) and out.cand_X.format == "csr"
    np.testing.assert_array_equal(
        out.cand_X.toarray(), np.vstack([a.cand_X.toarray(), b.cand_X.toarray()])
    )
    for k in ("cand_ids", "cand_g", "cand_vup", "cand_vlow", "cand_grp", "cand_y", "cand_U"):
        np.testing.assert_array_equal(
            getattr(out, k), np.concatenate([getattr(a, k), getattr(b, k)])
        )


def test_first_and_list_rules():
    assert m._MERGERS[m.FIRST]([3, 3]) == 3
    assert m._MERGERS[m.LIST]((1, 2)) == [1, 2]


def _example(cls, rng):
    """A message of type ``cls`` with every field set to a value off its default."""
    values = {
        "ids": np.arange(6),
        "XB": rng.random((6, 4)).astype(np.float32),
        "dB": np.where(rng.random((6, 5)) < 0.2, rng.normal(size=(6, 5)), 0.0),
        "shrink_margin": 0.125,
        "reship": True,
        "bank_ids": np.array([0, 3, 5]),
        "unshrink": {"ids": np.arange(2), "X": rng.random((2, 4)), "B": rng.random((2, 5))},
        "assign": {"ids": np.arange(2), "yp": np.array([1, 0])},
        "settle": {
            "ids": np.arange(3),
            "B": rng.random((3, 5)),
            "F": rng.random((3, 5)),
            "shipped": np.array([2]),
        },
        "scores": {"ids": np.arange(4), "F": rng.random((4, 5))},
        "dW": rng.random((5, 4)),
        "ds": rng.random(5),
        "da": rng.random(6),
        "a_new": rng.random(6),
        "yB": np.sign(rng.random(6) - 0.5),
        "grpB": rng.integers(0, 2, 6),
        "pick": (7, 1e-3),
    }
    return cls(**{f.name: values[f.name] for f in fields(cls)})


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_pack_unpack_round_trips_every_message_type(cls):
    rng = np.random.default_rng(2)
    for msg in (cls(), _example(cls, rng)):
        out = m.unpack_message(m.pack_message(msg))
        assert type(out) is cls
        for f in fields(cls):
            assert _same(getattr(msg, f.name), getattr(out, f.name)), f.name


def test_banked_rows_are_left_out_and_restored_from_the_receivers_bank():
    """Rows every receiver banks leave the wire and come back from the bank bit for bit; a
    receiver without a bank refuses such a message, a rebuilt one (``rows=False``) skips them."""
    from dmcsvm.engine.row_bank import RowBank

    rng = np.random.default_rng(4)
    XB = rng.normal(size=(6, 200)).astype(np.float32)
    msg = m.RoundMessage(ids=np.array([7, 2, 9, 4, 11, 3]), XB=XB, dB=rng.normal(size=(6, 3)))
    bank = RowBank()
    bank.add(np.array([9, 3, 7]), XB[[2, 5, 0]])
    held = m.HeldIds()
    held.ids.update({3, 7, 9, 100})
    have = held.rows(msg)
    assert have.tolist() == [True, False, True, False, False, True]
    blob = m.pack_message(msg, have)
    assert len(blob) < len(m.pack_message(msg)) - 3 * 200 * 4 + 200  # 3 rows fewer
    out = m.unpack_message(blob, bank)
    assert out.XB.dtype == np.float32 and np.array_equal(out.XB, XB)
    assert np.array_equal(out.dB, msg.dB) and np.array_equal(out.ids, msg.ids)
    with pytest.raises(RuntimeError, match="left out X rows that this receiver has no bank for"):
        m.unpack_message(blob)
    assert m.unpack_message(blob, rows=False).XB is None
    # nothing to leave out: no set, a gradient (SMO) message, or an empty batch
    assert m.HeldIds().rows(msg) is None
    assert held.rows(m.GradientMessage(ids=msg.ids, XB=XB)) is None
    assert held.rows(m.RoundMessage()) is None


def test_report_only_keeps_the_marked_fields():
    msg = m.LinearMessage(
        ids=np.arange(3),
        dB=np.ones((3, 2)),
        shrink_margin=0.5,
        assign={"ids": np.arange(1), "yp": np.zeros(1, np.int64)},
        pick=(4, 1e-3),
    )
    out = m.report_only(msg)
    # a rebuilt group still prunes its candidates as the coordinator picks them
    assert type(out) is m.LinearMessage
    assert out == m.LinearMessage(shrink_margin=0.5, pick=(4, 1e-3))
    assert m.report_only(m.GradientMessage(ids=np.arange(2))) == m.GradientMessage()
