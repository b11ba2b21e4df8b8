"""Submissions made by edits of the reference (grading.fixtures), the views of the
reference they start from (grading.regions), and the ladder's scale (grading.performance):
every fixture applies, a stale one fails loudly, and the score is monotone and continuous."""
import math

import pytest

from grading import fixtures, performance
from grading.regions import MarkerError, view

B, E = "BEGIN", "END"  # spelled apart so this file holds no marker lines itself


def lines(*items: str) -> str:
    return "".join(item + "\n" for item in items)


@pytest.mark.parametrize("name", sorted(fixtures.hostile()))
def test_hostile_fixture_applies_and_says_what_it_expects(name):
    fixture = fixtures.hostile()[name]
    files = fixture.files()
    assert set(files) == set(fixtures.STUDENT_FILES)
    assert files != fixtures.base_files(fixture.base), "a fixture must change something"
    assert {"score", "perf", "passed"} <= set(fixture.expected)
    assert fixture.expected["perf"] in ("none", "some", "at_most_base")


def test_ladder_runs_from_naive_to_reference_with_one_copy_of_each_kernel():
    rungs = fixtures.ladder()
    assert [r.share for r in rungs] == sorted(r.share for r in rungs)
    assert rungs[0].name == "naive" and rungs[-1].name == "reference"
    tiled = next(r for r in rungs if r.name == "tiled").files()
    assert tiled == fixtures.base_files("solution")  # the handout done as asked: the reference minus staff code
    assert "conv2d_tiled" in tiled["conv2d.cl"] and "conv2d_cpu" not in tiled["conv2d.cl"]
    naive = next(r for r in rungs if r.name == "naive").files()
    assert naive["conv2d.cl"] == (fixtures.ROOT / "grading" / "kernels" / "conv2d_naive.cl").read_text()


def test_a_stale_fixture_fails_loudly(tmp_path):
    path = tmp_path / "stale.toml"
    path.write_text(lines('description = "x"', 'base = "solution"', "[[edit]]", 'file = "conv2d.cl"',
                          "find = 'text that is not there'", "replace = 'y'"))
    with pytest.raises(fixtures.FixtureError, match="stale, edit 1: the text to replace occurs 0 times"):
        fixtures.load(path).files()


def test_fixture_needs_a_description_and_a_base(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('base = "solution"\n')
    with pytest.raises(fixtures.FixtureError, match="needs `description`"):
        fixtures.load(path)


def test_views_of_a_file_with_staff_code():
    text = lines("a", f"// {B} STAFF", "fast();", f"// {E} STAFF", "", "b", f"// {B} SOLUTION", "x = 1;",
                 f"// {B} STAFF", "if (fast()) return;", f"// {E} STAFF", "slow();", f"// {E} SOLUTION",
                 f"// {B} PROMPT", "// TODO: compute x", f"// {E} PROMPT", "c")
    assert view(text, "f.cpp", "//", "handout") == lines("a", "", "b", "// TODO: compute x", "c")
    assert view(text, "f.cpp", "//", "solution") == lines("a", "", "b", "x = 1;", "slow();", "c")
    assert view(text, "f.cpp", "//", "reference") == text


def test_staff_code_cannot_hold_a_solution():
    text = lines(f"// {B} STAFF", f"// {B} SOLUTION", f"// {E} SOLUTION", f"// {E} STAFF")
    with pytest.raises(MarkerError, match="f.cpp:2: BEGIN SOLUTION inside the STAFF region"):
        view(text, "f.cpp", "//", "handout")


RUNGS = [(16.0, 0.0), (8.0, 0.5), (2.0, 0.75), (0.5, 1.0)]


def test_ladder_share_at_the_rungs_and_beyond():
    assert performance.ladder_share(30.0, RUNGS) == 0.0
    assert performance.ladder_share(16.0, RUNGS) == 0.0
    assert performance.ladder_share(8.0, RUNGS) == pytest.approx(0.5)
    assert performance.ladder_share(0.5, RUNGS) == 1.0
    assert performance.ladder_share(0.1, RUNGS) == 1.0
    assert performance.ladder_share(4.0, RUNGS) == pytest.approx(0.5 + 0.25 * math.log(2) / math.log(4))


def test_ladder_share_is_monotone_and_continuous():
    times = [16 * 0.97**i for i in range(120)]
    shares = [performance.ladder_share(t, RUNGS) for t in times]
    assert shares == sorted(shares)
    assert max(b - a for a, b in zip(shares, shares[1:])) < 0.05  # no jump anywhere


def test_a_rung_slower_than_the_one_below_leaves_the_scale():
    rungs = [(16.0, 0.0), (25.0, 0.5), (2.0, 0.75), (0.5, 1.0)]  # "tiled" slower than naive on this device
    shares = [performance.ladder_share(16 * 0.97**i, rungs) for i in range(120)]
    assert shares == sorted(shares)
    assert max(b - a for a, b in zip(shares, shares[1:])) < 0.05
    assert performance.ladder_share(2.0, rungs) == pytest.approx(0.75)
