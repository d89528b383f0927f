"""The SVG's layout, read back from its XML as a reader's eye would meet it: the byte axis's
title clear of its tick labels on a ResNet, the blocks' brackets of an LLM in lanes where no two
meet, each over its block's instructions, delegate calls and device copies marked at their
instructions, and the largest tensors named in place, each label inside its rectangle or beside
it, no two labels meeting (issue 55, point 7). Text boxes are measured with DejaVu Sans's
advances (devplan/inspection/svg_text.py), the face the SVG asks for first."""

import re
import xml.etree.ElementTree as ET

import pytest
import torch

import devplan
from devplan.inspection.sources import top_module
from devplan.inspection.svg import HEIGHT, LEFT, TOP, WIDTH, layout_svg
from devplan.inspection.svg_text import Box, text_box
from devplan.units import size_text

SVG = "{http://www.w3.org/2000/svg}"


def _texts(root) -> list:
    return list(root.iter(f"{SVG}text"))


def _box(text, size: float = 11) -> Box:
    turned = text.get("transform", "").startswith("rotate(-90")
    return text_box(
        float(text.get("x")), float(text.get("y")), text.text, size, text.get("text-anchor", "start"), turned
    )


@pytest.fixture(scope="module")
def resnet_doc():
    """A transformers ResNet on 64x64 images: its buffer's tick labels are three-digit KiB."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1], layer_type="basic", num_labels=10)
    model = ResNetForImageClassification(config).eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 64, 64),))
    return devplan.inspect(devplan.compile(ep).data)


@pytest.fixture(scope="module")
def llama_doc(tmp_path_factory):
    """README's Llama (transformers' ExecuTorch recipe, 2 layers, a static KV cache) with --llm."""
    from testbed.llama_export import export_hf_decoder

    folder = tmp_path_factory.mktemp("llama")
    export_hf_decoder(folder, dim=64, layers=2, max_seq=64)
    program = folder / "llama.pte"
    devplan.compile(str(folder / "model.pt2"), str(program), llm=True, constant_methods={"get_bos_id": 1})
    data = program.read_bytes()
    doc = devplan.inspect(data)
    assert layout_svg(doc) == layout_svg(devplan.inspect(data))  # byte-identical, drawn again
    return doc


def test_the_byte_axis_title_meets_no_tick_label(resnet_doc):
    root = ET.fromstring(layout_svg(resnet_doc))
    texts = _texts(root)
    (title,) = [t for t in texts if t.text == "byte offset ↓"]
    ticks = [t for t in texts if t.get("text-anchor") == "end" and re.fullmatch(r"[\d.]+ (B|KiB|MiB)", t.text or "")]
    assert any(len(t.text) >= len("100.0 KiB") for t in ticks), [t.text for t in ticks]  # the widest labels
    assert not [t.text for t in ticks if _box(title).meets(_box(t))]
    assert _box(title).left >= 0


def _brackets(root) -> list[tuple[float, float, float, str]]:
    """Each bracket as (its lane's y, left, right, tooltip): a path drawn as M x y v3 H x v-3."""
    found = []
    for path in root.iter(f"{SVG}path"):
        shape = re.fullmatch(r"M([\d.]+) ([\d.]+) v3 H([\d.]+) v-3", path.get("d", ""))
        if shape:
            left, y, right = map(float, shape.groups())
            found.append((y, left, right, path.find(f"{SVG}title").text))
    return found


def test_an_llms_brackets_sit_in_lanes_over_their_blocks_instructions(llama_doc):
    """A layer's tensors live on past it (layers.0's reach #191), so brackets over tensors'
    lives overlapped; over the instructions that run each block, in lanes, none meet."""
    root = ET.fromstring(layout_svg(llama_doc))
    found = _brackets(root)
    assert len({name.split(":")[0] for *_, name in found}) >= 3, found
    for i, (y, left, right, name) in enumerate(found):
        for other_y, other_left, other_right, other in found[i + 1 :]:
            assert y != other_y or right <= other_left or other_right <= left, (name, other)
    method = llama_doc["methods"][0]
    blocks = {row["index"]: top_module(row["module"]) for row in method["instructions"]}
    for *_, tip in found:
        name, first, last = re.fullmatch(r"(.+): instructions #(\d+)(?:-#(\d+))?", tip).groups()
        first, last = int(first), int(last or first)
        assert blocks[first] == name and blocks[last] == name
        assert all(blocks[i] == name or blocks[i].startswith("(") for i in range(first, last + 1)), tip
    # the labels under the brackets meet neither each other nor the instruction axis's ticks
    labels = [
        _box(t) for t in _texts(root) if t.text and float(t.get("y")) > TOP + HEIGHT + 20 and t.text != "instruction →"
    ]
    named = [b for b in labels if b.top < TOP + HEIGHT + 120]
    assert not [(a, b) for i, a in enumerate(named) for b in named[i + 1 :] if a.meets(b)]


def test_delegate_calls_and_device_copies_are_marked_at_their_instructions():
    from testbed.hf_models import resnet

    module, args, _ = resnet()
    program = devplan.compile(torch.export.export(module, args), delegates=["cuda:0=aten::convolution"]).data
    doc = devplan.inspect(program)
    method = doc["methods"][0]
    calls = [row["index"] for row in method["instructions"] if row["kind"] == "delegate"]
    copies = [row["index"] for row in method["instructions"] if (row["op"] or "").startswith("et_copy::")]
    assert calls and copies
    root = ET.fromstring(layout_svg(doc))
    steps = method["counts"]["instructions"]
    marks: dict[str, list[int]] = {"delegate": [], "copy": []}
    for path in root.iter(f"{SVG}path"):
        kind = (path.get("class") or "").split()
        if kind[:1] == ["mark"]:
            index = int(re.match(r"#(\d+): ", path.find(f"{SVG}title").text).group(1))
            x = float(re.match(r"M([\d.]+) ", path.get("d")).group(1))
            assert abs(x - (LEFT + (index + 0.5) * WIDTH / steps)) < 0.01  # under its instruction's column
            marks[kind[1]].append(index)
    charts = len(method["buffers"])  # the axis of each buffer's chart carries them
    assert sorted(marks["delegate"]) == sorted(calls * charts)
    assert sorted(marks["copy"]) == sorted(copies * charts)
    tips = [t.text for t in root.iter(f"{SVG}title")]
    assert f"#{calls[0]}: calls delegate 0 (DevplanDelegate on cuda:0)" in tips
    assert any(re.fullmatch(rf"#{copies[0]}: copies v\d+ to cuda:0", tip) for tip in tips), tips


@pytest.mark.parametrize("which", ["resnet_doc", "llama_doc"])
def test_the_largest_tensors_are_named_in_place(which, request):
    doc = request.getfixturevalue(which)
    method, buffer = doc["methods"][0], doc["methods"][0]["buffers"][0]
    root = ET.fromstring(layout_svg(doc))
    drawn = [t for t in method["tensors"] if t["mem_id"] == buffer["mem_id"] and t["held"] and t["nbytes"]]
    area = lambda t: t["nbytes"] * (t["held"][1] - t["held"][0] + 1)
    wanted = {max(drawn, key=lambda t: (t["nbytes"], -t["value"]))["value"]}
    wanted |= {t["value"] for t in sorted(drawn, key=lambda t: (-area(t), t["value"]))[:3]}
    rects = {
        r.find(f"{SVG}title").text.split()[0]: r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None
    }
    plot = Box(LEFT, TOP, LEFT + WIDTH, TOP + HEIGHT)
    boxes = {}
    for group in root.iter(f"{SVG}g"):
        if (group.get("class") or "").startswith("label") and float(group.find(f"{SVG}text").get("y")) < TOP + HEIGHT:
            text = group.find(f"{SVG}text")
            value = int(group.get("data-value"))
            box = _box(text, float(text.get("font-size")))
            tensor = next(t for t in drawn if t["value"] == value)
            assert text.text.startswith(f"v{value}")
            if size_text(tensor["nbytes"]) not in text.text:
                assert text.text == f"v{value}"  # the size left out only where nothing more fits
            rect = rects[f"v{value}"]
            inside = Box(
                float(rect.get("x")),
                float(rect.get("y")),
                float(rect.get("x")) + float(rect.get("width")),
                float(rect.get("y")) + float(rect.get("height")),
            )
            assert box.within(inside) if "inside" in group.get("class") else box.within(plot), text.text
            boxes[value] = box
    assert wanted <= set(boxes), (wanted, sorted(boxes))
    placed = list(boxes.values())
    assert not [(a, b) for i, a in enumerate(placed) for b in placed[i + 1 :] if a.meets(b)]
