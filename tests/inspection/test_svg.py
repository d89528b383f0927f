"""`devplan inspect --svg`: each planned buffer drawn over time, one rectangle per tensor."""

import xml.etree.ElementTree as ET

import torch

import devplan
from devplan.inspection.svg import HEIGHT, LEFT, TOP, WIDTH, layout_svg
from testbed.cli import devplan as cli
from testbed.models import export

NS = {"svg": "http://www.w3.org/2000/svg"}


def test_every_held_tensor_is_a_rectangle_where_the_plan_put_it():
    ep, _, _ = export("cat_split_chunk")
    data = devplan.compile(ep).data
    doc = devplan.inspect(data)
    text = layout_svg(doc)
    assert text == layout_svg(devplan.inspect(data))  # deterministic
    root = ET.fromstring(text)
    rects = {
        r.find("svg:title", NS).text.split()[0]: r
        for r in root.findall("svg:rect", NS)
        if r.find("svg:title", NS) is not None
    }
    method, (buffer,) = doc["methods"][0], doc["methods"][0]["buffers"]
    held = [t for t in method["tensors"] if t["mem_id"] == 1 and t["held"] and t["nbytes"]]
    assert set(rects) == {f"v{t['value']}" for t in held}
    steps = method["counts"]["instructions"]
    for t in held:
        rect = rects[f"v{t['value']}"]
        assert abs(float(rect.get("y")) - (TOP + t["offset"] * HEIGHT / buffer["size"])) < 0.01
        assert abs(float(rect.get("height")) - t["nbytes"] * HEIGHT / buffer["size"]) < 0.01
        assert abs(float(rect.get("x")) - (LEFT + t["held"][0] * WIDTH / steps)) < 0.01
        assert abs(float(rect.get("width")) - (t["held"][1] + 1 - t["held"][0]) * WIDTH / steps) < 0.01


def test_the_command_writes_the_picture_and_still_prints(tmp_path):
    program = tmp_path / "p.pte"
    ep, _, _ = export("multi_input_nested")
    program.write_bytes(devplan.compile(ep).data)
    run = cli("inspect", program, "--svg", tmp_path / "p.svg", "-s", "buffers")
    assert run.returncode == 0, run.stderr
    assert "lower bound" in run.stdout
    root = ET.parse(tmp_path / "p.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "buffer 1 (cpu)" in "".join(root.itertext())


def test_the_picture_has_axes_bound_peak_legend_and_named_tooltips():
    """A transformers GPT-2: ticks on both axes, the lower bound and the peak as labelled lines,
    a legend, and each tensor's tooltip saying where it came from; zero-byte tensors are not drawn
    and not counted."""
    from testbed.hf_models import gpt2

    module, args, _ = gpt2()
    doc = devplan.inspect(devplan.compile(torch.export.export(module, args)).data)
    root = ET.fromstring(layout_svg(doc))
    words = "".join(root.itertext())
    method, (buffer,) = doc["methods"][0], doc["methods"][0]["buffers"]
    drawn = [t for t in method["tensors"] if t["mem_id"] == 1 and t["held"] and t["nbytes"]]
    assert f"{len(drawn)} tensors over {method['counts']['instructions']} instructions" in words
    texts = [t.text for t in root.findall("svg:text", NS)]
    assert "#0" in texts and "0 B" in texts and len([t for t in texts if t.startswith("#")]) >= 5
    assert any(t.startswith("lower bound ") for t in texts) and any(t.startswith("peak ") for t in texts)
    assert f"peak at #{buffer['peak_instruction']}" in texts
    assert {"input", "output", "activation (blocks alternate)", "lower bound", "peak"} <= set(texts)
    tips = [r.find("svg:title", NS).text for r in root.findall("svg:rect", NS) if r.find("svg:title", NS) is not None]
    assert len(tips) == len(drawn)
    assert any(" · transformer.h.1.attn.c_attn (Conv1D) addmm · " in tip for tip in tips)
    # each block named under its instructions, without hovering, in the order they run
    blocks = [t for t in texts if t in ("transformer.h.0", "transformer.h.1", "h.0", "h.1")]
    assert [block[-1] for block in blocks] == ["0", "1"], texts
