"""Exception text in messages and reports: bounded, and safe when str() itself fails."""

from __future__ import annotations

import json

from trainparity._internal.coverage.audit import ExactlyOnce, audit_rank_iterables
from trainparity._internal.error_text import MAX_ERROR_TEXT, error_text
from trainparity.outcomes import Outcome


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_short_errors_read_as_type_and_message():
    assert error_text(ValueError("bad seed")) == "ValueError: bad seed"


def test_long_errors_are_cut_and_say_how_much_was_cut():
    text = error_text(RuntimeError("x" * 5_000_000))
    assert len(text) < MAX_ERROR_TEXT + 100
    assert text.startswith("RuntimeError: xxx")
    assert text.endswith(
        f"... ({len('RuntimeError: ') + 5_000_000 - MAX_ERROR_TEXT} more characters cut)"
    )


def test_an_exception_whose_str_raises_still_gives_a_message():
    assert error_text(_Unprintable()) == (
        "_Unprintable: <str() of the exception raised RuntimeError>"
    )


def test_a_huge_or_unprintable_user_error_gives_a_bounded_error_report():
    def huge(batch):
        raise ValueError("tensor dump " * 1_000_000)

    def unprintable(batch):
        raise _Unprintable()

    for extractor in (huge, unprintable):
        result = audit_rank_iterables(
            {0: [[1]]}, sample_id_extractor=extractor, policy=ExactlyOnce([1])
        )
        assert result.outcome is Outcome.ERROR
        assert result.message.startswith("sample ID extraction failed at rank 0 batch 0: ")
        assert len(json.dumps(result.to_dict())) < 20_000
