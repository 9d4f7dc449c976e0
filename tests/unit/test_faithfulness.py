"""Answer faithfulness: the written answer's numbers and names against the rows it was given."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from nl2sql.evaluation.faithfulness import Faithfulness, check_faithfulness

GENRES = (["Genre", "Tracks"], [["Rock", 1297], ["Latin", 579], ["Metal", 374]])


def check(answer: str, question: str = "How many tracks per genre?", columns: list[str] | None = None,
          rows: list[list] | None = None) -> Faithfulness:
    return check_faithfulness(answer, question, GENRES[0] if columns is None else columns,
                              GENRES[1] if rows is None else rows)


def unsupported(answer: str, **kw: object) -> list[str]:
    return check(answer, **kw).unsupported_numbers  # type: ignore[arg-type]


# --- numbers ---------------------------------------------------------------------------------------


def test_a_number_in_the_rows_is_supported_with_thousands_separators() -> None:
    verdict = check("Rock has 1,297 tracks and Latin 579.")
    assert verdict == Faithfulness(faithful=True, unsupported_numbers=[], unsupported_entities=[], checked=2)


def test_a_rounded_number_that_is_not_in_the_rows_is_unsupported() -> None:
    verdict = check("Rock has 1,300 tracks.")
    assert verdict.faithful is False
    assert verdict.unsupported_numbers == ["1,300"]
    assert verdict.checked == 1


def test_precision_as_written() -> None:
    rows = [["USA", 523.06]]
    cols = ["Country", "Total"]
    for written in ("$523.06", "523.1", "523", "$523"):
        assert unsupported(f"The USA spent {written}.", columns=cols, rows=rows) == [], written
    assert unsupported("The USA spent $523.60.", columns=cols, rows=rows) == ["$523.60"]
    assert unsupported("The USA spent 523.0.", columns=cols, rows=rows) == ["523.0"]
    assert unsupported("The USA spent 1234.5.", columns=cols, rows=[["USA", 1234.5]]) == []


def test_decimal_and_string_cells_are_numbers_too() -> None:
    assert unsupported("It is 12.50.", columns=["x"], rows=[[Decimal("12.5")]]) == []
    assert unsupported("It is 12.50.", columns=["x"], rows=[["12.5"]]) == []


def test_negative_numbers_keep_their_sign() -> None:
    assert unsupported("The change was -5.", columns=["d"], rows=[[-5]]) == []
    assert unsupported("The change was -5.", columns=["d"], rows=[[5]]) == ["-5"]


def test_a_percentage_from_a_share_in_the_rows() -> None:
    rows = [["Rock", 0.3718], ["Latin", 0.1659]]
    assert unsupported("Rock makes up 37.2% of tracks, Latin 16.6 %.", columns=["Genre", "Share"], rows=rows) == []
    assert unsupported("Rock makes up 37 percent.", columns=["Genre", "Share"], rows=rows) == []
    assert unsupported("Rock makes up 38.2%.", columns=["Genre", "Share"], rows=rows) == ["38.2%"]


def test_a_percentage_written_in_the_rows() -> None:
    assert unsupported("Rock is 37.2%.", columns=["Genre", "Pct"], rows=[["Rock", 37.18]]) == []


def test_a_share_times_100_supports_only_a_percentage() -> None:
    assert unsupported("Rock: 37.2 of them.", columns=["Genre", "Share"], rows=[["Rock", 0.3718]]) == ["37.2"]


def test_the_row_count_is_supported() -> None:
    assert unsupported("There are 3 genres.") == []
    assert unsupported("There are 4 genres.") == ["4"]


def test_a_column_sum_is_supported() -> None:
    assert unsupported("Together they hold 2,250 tracks.") == []
    rows = [["USA", 523.06], ["Canada", 303.96]]
    assert unsupported("In all $827.02, or about 827.", columns=["Country", "Total"], rows=rows) == []


def test_a_year_neither_the_rows_nor_the_question_hold_is_unsupported() -> None:
    verdict = check("In 2013 Rock had 1,297 tracks.")
    assert verdict.unsupported_numbers == ["2013"]
    assert unsupported("In 2013 Rock had 1,297 tracks.", question="How many tracks per genre in 2013?") == []


def test_a_number_in_the_question_is_supported() -> None:
    assert unsupported("The top 5 genres are listed.", question="What are the top 5 genres?") == []


def test_a_year_inside_a_date_cell_is_supported() -> None:
    rows = [["2013-12-22", 1.98], [dt.date(2012, 5, 1), 3.96]]
    assert unsupported("The last invoice was in 2013; one in 2012.", columns=["InvoiceDate", "Total"], rows=rows) == []


def test_a_number_inside_a_text_cell_is_supported() -> None:
    rows = [["Symphony No. 5 in C Minor", 1]]
    assert unsupported("Symphony No. 5 was bought once.", columns=["Track", "Sold"], rows=rows) == []


def test_a_date_in_the_answer_checks_only_its_year() -> None:
    verdict = check("The first sale was on 2009-01-01.", columns=["Year"], rows=[[2009]])
    assert verdict.faithful is True and verdict.checked == 1
    assert unsupported("The first sale was on 2010-01-01.", columns=["Year"], rows=[[2009]]) == ["2010"]
    assert unsupported("On January 5, 2009 and 7 March 2009 at 10:30.", columns=["Year"], rows=[[2009]]) == []
    assert unsupported("On 01/15/2009.", columns=["Year"], rows=[[2009]]) == []


def test_ordinals_list_markers_and_identifiers_are_not_checked() -> None:
    answer = ("1. Rock is 1st with 1,297 tracks\n"
              "2) Latin is 2nd\n"
              "  3. Metal is 3rd, in file chinook_001, MPEG-4 audio, ticket #7, a 5-star v2.1 pick")
    verdict = check(answer)
    assert verdict.faithful is True
    assert verdict.checked == 1  # only 1,297


def test_a_range_checks_both_ends() -> None:
    assert unsupported("From 579-1297 tracks.") == []
    assert unsupported("From 2009-2013.") == ["2009", "2013"]


def test_unsupported_numbers_are_listed_once_as_written() -> None:
    verdict = check("Rock has 1,300 tracks, yes 1,300, and 42 albums.")
    assert verdict.unsupported_numbers == ["1,300", "42"]
    assert verdict.checked == 3


# --- names -----------------------------------------------------------------------------------------


def test_quoted_and_bold_names_in_the_rows_are_supported() -> None:
    verdict = check('The top genre is **Rock**, ahead of "Latin" and “Metal” and \'metal\'.')
    assert verdict.faithful is True
    assert verdict.checked == 4


def test_a_bold_or_quoted_name_the_rows_do_not_list_is_unsupported() -> None:
    verdict = check('The top genre is **Jazz**, then "Blues".')
    assert verdict.unsupported_entities == ["Jazz", "Blues"]
    assert verdict.faithful is False


def test_names_supported_by_a_column_name_or_the_question() -> None:
    assert check("**Tracks** per genre.").faithful is True
    assert check('Counted for "Heavy Metal" fans.', question="How many tracks for Heavy Metal fans?").faithful
    assert check("**Billing Country**", columns=["BillingCountry"], rows=[["USA"]]).faithful is True


def test_a_name_containing_a_text_cell_or_contained_in_one() -> None:
    assert check("**Rock genre** leads.").faithful is True
    rows = [["Rock And Roll", 12]]
    assert check("**Rock** leads.", columns=["Genre", "n"], rows=rows).faithful is True
    # a cell is read as a word inside the name, not as letters inside a word
    assert check("**Rocky**", columns=["Genre", "n"], rows=[["Rock", 1], ["Pop", 2]]).faithful is False


def test_bold_spans_that_are_skipped() -> None:
    for answer in ("**Note:** Rock leads.", "**Top 5 genres** follow.",
                   "**This whole sentence is bold and not a name at all.**"):
        verdict = check(answer)
        assert verdict.unsupported_entities == [], answer
    assert check("**Top 5 genres** follow.").checked == 1  # the 5 is still a number: supported by nothing
    assert check("**Top 5 genres** follow.").unsupported_numbers == ["5"]


def test_a_quoted_name_inside_bold_is_checked_once() -> None:
    verdict = check('**"Jazz"** leads.')
    assert verdict.unsupported_entities == ["Jazz"] and verdict.checked == 1


def test_apostrophes_are_not_quotes() -> None:
    assert check("Rock's lead isn't small; the genres' totals are shown.").checked == 0


def test_an_answer_with_nothing_to_check_is_faithful() -> None:
    assert check("Rock leads.") == Faithfulness(faithful=True, unsupported_numbers=[], unsupported_entities=[],
                                                checked=0)
