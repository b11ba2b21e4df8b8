"""The layers (scripts/architecture.py): every import and include points down, and the
picture in ARCHITECTURE.md is the one the code draws today."""
import importlib.util
import re

from grading.handout import ROOT

spec = importlib.util.spec_from_file_location("architecture", ROOT / "scripts" / "architecture.py")
architecture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(architecture)


def test_every_arrow_points_down():
    assert architecture.upward(architecture.arrows()) == []


def test_architecture_md_shows_the_layers_as_the_code_has_them():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = re.search(re.escape(architecture.MARK_BEGIN) + r"\n(.*?)\n" + re.escape(architecture.MARK_END), text, re.S)
    assert block, "ARCHITECTURE.md lacks the layers: python scripts/architecture.py --write"
    assert block.group(1) == architecture.picture(architecture.arrows()), \
        "the layers changed: python scripts/architecture.py --write"


def test_every_source_file_has_a_layer():
    assert [p for p in architecture.sources() if architecture.layer_of(p) is None] == []


def test_no_relative_import_leaves_its_package():
    """`from ... import x` climbs at most to the file's top-level package: above it, the import
    works only while that package sits inside another one (the device's did, in opencl_functions)."""
    import ast
    from pathlib import PurePosixPath

    beyond = []
    for rel in architecture.sources():
        if not rel.endswith(".py"):
            continue
        folders = PurePosixPath(rel).parts[:-1]
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > len(folders):
                beyond.append(f"{rel}:{node.lineno}")
    assert beyond == []
