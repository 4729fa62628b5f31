"""The one converter: a class's documented plain form (renames, derived keys, omitted fields) and strict reading back."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pytest

from fusion_core.boundary.convert import PlainDataError, from_plain, plain, to_plain
from fusion_core.export.result import Consumer, OutputFile
from fusion_core.plan.discovery import Discovery, Match, Rejection
from fusion_core.plan.view import InspectionView
from fusion_core.run.results import EndToEndCheck, Timing, UpstreamFamily, UpstreamReport

if TYPE_CHECKING:
    from torch import nn  # only for type checkers: resolves to Any at run time


@dataclass
class Row:
    PLAIN_KEYS: ClassVar[tuple[str, ...]] = ("path", "double", "x")

    path: str = field(metadata=plain("module"))
    x: float = 0.0
    live: nn.Module | None = None  # not in PLAIN_KEYS: left out, keeps its default when read

    @property
    def double(self) -> float:
        return self.x * 2


@dataclass
class Box:
    row: Row | None
    shape: tuple[int, ...]
    where: Path
    rows: list[Row] = field(default_factory=list)
    cls: type | None = field(default=None, metadata=plain(omit=True))


def _trip(tp, value):
    return from_plain(tp, json.loads(json.dumps(to_plain(value))))


def test_declared_keys_renames_derived_values_and_order():
    data = to_plain(Row("a.b", 1.5, live=object()))
    assert list(data.items()) == [("module", "a.b"), ("double", 3.0), ("x", 1.5)]
    assert _trip(Row, Row("a.b", 1.5)) == Row("a.b", 1.5)


def test_paths_tuples_nan_and_optional_dataclasses():
    box = Box(Row("m", math.nan), (1, 2), Path("/x/y"), [Row("n", math.inf)], cls=int)
    data = to_plain(box)
    assert data["shape"] == [1, 2] and data["where"] == "/x/y" and "cls" not in data
    back = _trip(Box, box)
    assert back.shape == (1, 2) and back.where == Path("/x/y") and back.cls is None
    assert math.isnan(back.row.x) and back.rows[0].x == math.inf
    assert _trip(Box, Box(None, (), Path("."))).row is None


@pytest.mark.parametrize(
    "data",
    [
        {"row": None, "shape": [1, "2"], "where": "x"},  # a string for an int
        {"row": {"module": 7}, "shape": [], "where": "x"},  # a number for a string
        {"row": None, "shape": []},  # a required key missing
        {"row": None, "shape": [], "where": 3},  # a number for a path
        [1, 2],  # not an object
    ],
)
def test_reading_back_is_strict(data):
    with pytest.raises(PlainDataError):
        from_plain(Box, data)


def test_not_plain_data_is_refused():
    with pytest.raises(TypeError, match="not plain data"):
        to_plain(object())
    with pytest.raises(TypeError, match="not plain data"):
        to_plain({"a": lambda: 0})


def test_engine_types_are_their_plain_form():
    match = Match.of("a.proj", int, float, "ok")
    assert to_plain(match) == {
        "module": "a.proj", "class": "int", "fused_class": "float", "reason": "ok", "class_path": "builtins.int",
    }  # fmt: skip
    back = _trip(Match, match)
    assert back == match and back.original_class is None  # the classes stay in the engine
    d = Discovery("qkv", "M", [match], [Rejection("b", "C", "no")], empty_message="")
    assert _trip(Discovery, d) == d
    assert to_plain(OutputFile("model.safetensors", 12)) == {"name": "model.safetensors", "bytes": 12}
    assert _trip(list[Consumer], [Consumer("t", "loads exactly", "load()", max_abs_diff=0.0)])[0].max_abs_diff == 0.0


def test_documented_hooks_round_trip():
    e2e = EndToEndCheck("", "logits", "text", {"input_ids": [1, 8]}, None, Timing(2.0, 1.0, 5))
    data = to_plain(e2e)
    assert data["entry"] == "(model)" and data["timing"]["verdict"] == "faster" and "seconds" not in data["timing"]
    assert _trip(EndToEndCheck, e2e).entry == ""
    report = UpstreamReport(available=True, within_tolerance=True, families=[UpstreamFamily("qkv", "agrees")])
    assert to_plain(report)["matches_ours"] is True and _trip(UpstreamReport, report) == report


def test_the_converter_and_the_views_import_no_torch():
    code = "import sys, fusion_core.plan.view, fusion_core.host.wire; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.split() == ["False", "False"]
    assert InspectionView.__module__ == "fusion_core.plan.view"
