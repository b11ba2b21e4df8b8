"""Files stay a size one can read: no file written here (code, tests, documents) is over
450 lines and no README over 300; a larger one is split by concern, its detail moved into
docs/. Data (.json, .pt, .png) and the public programs kept as they were fetched (a folder
with a SOURCE.md, such as tests/programs/dcgan/) are not counted. And the documents' relative
links still reach their file, and their heading where they name one, after such a split."""
import re
from pathlib import Path

from grading.handout import ROOT, project_files

MAX_LINES = 450
MAX_README_LINES = 300
DATA = {".json", ".pt", ".png"}


def written_here() -> list:
    """The project's files (tracked, and untracked but not ignored) that this project wrote."""
    files = project_files()
    public = {Path(f).parent for f in files if Path(f).name == "SOURCE.md"}
    return [f for f in files if Path(f).suffix not in DATA and not public.intersection(Path(f).parents)]


def lines(rel: str) -> int:
    return len((ROOT / rel).read_bytes().splitlines())


def test_no_file_written_here_is_over_450_lines():
    over = {f: n for f in written_here() if (n := lines(f)) > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines (split them by concern): {over}"


def test_no_readme_is_over_300_lines():
    over = {f: n for f in written_here() if Path(f).name == "README.md" and (n := lines(f)) > MAX_README_LINES}
    assert not over, f"READMEs over {MAX_README_LINES} lines (move the detail into docs/): {over}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(text: str) -> set:
    """The anchors of a Markdown file's headings, as GitHub makes them: lower case, spaces to
    hyphens, punctuation but hyphens and underscores dropped."""
    slugs = set()
    for heading in re.findall(r"^#+\s+(.*?)\s*$", text, re.M):
        slugs.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return slugs


def test_every_relative_link_of_the_documents_reaches_its_target():
    broken = []
    for doc in (f for f in written_here() if f.endswith(".md")):
        for target in LINK.findall((ROOT / doc).read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto: and the like
            path, _, anchor = target.partition("#")
            where = (ROOT / doc).parent / path if path else ROOT / doc
            if not where.exists():
                broken.append(f"{doc}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
                broken.append(f"{doc}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_check_finds_a_missing_file_and_heading():
    assert "install" in anchors("# The device\n\n## Install\n")
    assert "torchcompile-on-the-device" in anchors("## torch.compile on the device\n")
    assert LINK.findall("see [the docs](docs/device/api.md#tools) and [x](https://a.b)") == \
        ["docs/device/api.md#tools", "https://a.b"]
