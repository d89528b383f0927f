"""Hostile .pt2 archives, each built here from samples/mlp.pt2: `devplan compile` in a fresh
process refuses every one with exit code 2 and one line naming the archive (and the member
at fault) and what to do; it runs no code from the archive and its memory stays bounded
whatever sizes the archive declares."""

import functools
import io
import json
import stat
import subprocess
import zipfile

import pytest
import torch

from testbed.damage import Payload
from testbed.peak import run_measured
from tests.compile.test_cli import ROOT

# a fresh process per archive: two minutes in all; test_load_safety keeps a few in the fast tier
pytestmark = pytest.mark.sweep

SAMPLE = ROOT / "samples" / "mlp.pt2"
PEAK_RSS = 1 << 30  # the bound for any hostile input
TIMEOUT_S = 120
GiB = 1 << 30


def compile_measured(archive, out):
    """`devplan compile archive -o out` in a child process: (exit code, stderr, peak RSS in
    bytes, or None when something killed the child before it could say). One still running
    after TIMEOUT_S is killed, and subprocess.TimeoutExpired fails the test."""
    child, peak = run_measured(
        ["-m", "devplan", "compile", str(archive), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT_S,
    )
    return child.returncode, child.stderr.decode(errors="replace"), peak


@functools.cache
def sample_members() -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(SAMPLE) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def build(target, change=lambda name, data: data, extra=(), compress=zipfile.ZIP_STORED):
    """mlp.pt2 rewritten member by member into `target`: change(name, data) gives a member's new
    bytes (None drops it); `extra` is (name or ZipInfo, bytes) pairs appended after them."""
    with zipfile.ZipFile(target, "w", compression=compress) as new:
        for info, data in sample_members():
            data = change(info.filename, data)
            if data is not None:
                new.writestr(info.filename, data, compress_type=compress)
        for name, data in extra:
            new.writestr(name, data)
    return target


def member(suffix: str) -> str:
    return next(info.filename for info, _ in sample_members() if info.filename.endswith(suffix))


def payload(marker) -> bytes:
    buffer = io.BytesIO()
    torch.save(Payload(marker), buffer)
    return buffer.getvalue()


def replaced(suffix, new):
    """A change() giving the member ending in `suffix` the bytes `new` (None drops it)."""
    return lambda name, data: new if name.endswith(suffix) else data


def edit_json(suffix, edit):
    """A change() that rewrites the JSON member ending in `suffix` with edit(document)."""

    def change(name, data):
        if not name.endswith(suffix):
            return data
        document = json.loads(data)
        edit(document)
        return json.dumps(document).encode()

    return change


def weight_meta(edit):
    """A change() applying edit(meta) to the config entry of layers.0.weight (file weight_0)."""
    return edit_json("model_weights_config.json", lambda doc: edit(doc["config"]["layers.0.weight"]))


def set_sizes(sizes, strides=None):
    def edit(meta):
        meta["tensor_meta"]["sizes"] = [{"as_int": n} for n in sizes]
        meta["tensor_meta"]["strides"] = [{"as_int": n} for n in (strides or [1] * len(sizes))]

    return edit


def patch_member(path, name, local: dict[int, bytes], central: dict[int, bytes]):
    """Overwrite fields of member `name`: `local` in its local header, `central` in its central
    directory entry, each by offset within the record (its real bytes stay)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        header, entry = archive.getinfo(name).header_offset, archive.start_dir
        for info in archive.infolist()[: archive.infolist().index(archive.getinfo(name))]:
            entry += 46 + len(info.orig_filename.encode()) + len(info.extra) + len(info.comment)
    for base, fields in ((header, local), (entry, central)):
        for offset, value in fields.items():
            data[base + offset : base + offset + len(value)] = value
    path.write_bytes(bytes(data))
    return path


def declared_size(path, name, size):
    """Member `name` declaring `size` uncompressed bytes."""
    value = size.to_bytes(4, "little")
    return patch_member(path, name, {22: value}, {24: value})


def encrypted(path, name):
    """Member `name` flagged as encrypted."""
    with zipfile.ZipFile(path) as archive:
        flags = archive.getinfo(name).flag_bits | 1
    return patch_member(path, name, {6: flags.to_bytes(2, "little")}, {8: flags.to_bytes(2, "little")})


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """mlp.pt2 plus one member that deflates to 1 GiB of zeros in about 1 MiB of archive."""
    path = build(tmp_path_factory.mktemp("bomb") / "bomb.pt2")
    info = zipfile.ZipInfo(member("archive_format").replace("archive_format", "extra/blob"))
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "a", compresslevel=1) as archive, archive.open(info, "w", force_zip64=True) as blob:
        chunk = bytes(1 << 20)
        for _ in range(1024):
            blob.write(chunk)
    return path


def deflated_bomb_weight(tmp, marker):
    """weight_0 replaced by 1 GiB of deflated zeros, its config claiming that shape."""
    path = build(tmp / "crafted.pt2", weight_meta(set_sizes([GiB // 4])))
    with zipfile.ZipFile(path) as old:
        kept = [(info, old.read(info)) for info in old.infolist() if not info.filename.endswith("weights/weight_0")]
    with zipfile.ZipFile(path, "w") as new:
        for info, data in kept:
            new.writestr(info, data)
        info = zipfile.ZipInfo(member("weights/weight_0"))
        info.compress_type = zipfile.ZIP_DEFLATED
        with new.open(info, "w", force_zip64=True) as blob:
            for _ in range(1024):
                blob.write(bytes(1 << 20))
    return path, ["weight_0", "expands"]


def huge_weight(tmp, data):
    """layers.0.weight claiming 3 GiB of float32 over weight_0 holding `data` (torch makes zeros
    of the claimed shape for an empty member)."""

    def change(name, old):
        return data if name.endswith("weights/weight_0") else weight_meta(set_sizes([3 << 28]))(name, old)

    return build(tmp / "crafted.pt2", change), ["layers.0.weight", "weight_0"]


def prefix() -> str:
    return member("models/model.json").split("models/")[0]


def pickled_config(suffix, key):
    def edit(doc):
        doc["config"][key] = dict(
            path_name="weight_0" if "weights" in suffix else "tensor_0",
            is_param=False,
            use_pickle=True,
            tensor_meta=None,
        )

    return edit


def symlink_info(name):
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


# name -> builder(tmp_path, marker) -> (archive, needles its one-line refusal must hold)
VARIANTS = {
    "legacy_weights_pt": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}data/weights/model.pt", payload(marker))]),
        ["data/weights/model.pt", "legacy"],
    ),
    "legacy_constants_pt": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}data/constants/model.pt", payload(marker))]),
        ["data/constants/model.pt", "legacy"],
    ),
    "pickled_weight": lambda tmp, marker: (
        build(
            tmp / "crafted.pt2",
            lambda name, data: (
                payload(marker)
                if name.endswith("weights/weight_0")
                else weight_meta(lambda meta: meta.update(use_pickle=True))(name, data)
            ),
        ),
        ["model_weights_config.json", "pickled object"],
    ),
    "pickled_constant": lambda tmp, marker: (
        build(
            tmp / "crafted.pt2",
            edit_json("constants_config.json", pickled_config("constants", "c")),
            extra=[(f"{prefix()}data/constants/tensor_0", payload(marker))],
        ),
        ["model_constants_config.json", "pickled object"],
    ),
    "custom_object_constant": lambda tmp, marker: (
        build(
            tmp / "crafted.pt2",
            edit_json(
                "constants_config.json",
                lambda doc: doc["config"].update(
                    c=dict(path_name="custom_obj_0", is_param=False, use_pickle=False, tensor_meta=None)
                ),
            ),
            extra=[(f"{prefix()}data/constants/custom_obj_0", payload(marker))],
        ),
        ["model_constants_config.json", "pickled object"],
    ),
    "pickled_sample_inputs": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("sample_inputs/model.pt", payload(marker))),
        ["sample_inputs/model.pt", "not plain tensors"],
    ),
    # found by the .pt2 fuzz run: an input 2^31 + 8 rows long compiled to serialize, which failed (exit 3)
    "size_over_int32": lambda tmp, marker: (
        build(
            tmp / "crafted.pt2",
            edit_json(
                "models/model.json",
                lambda doc: next(
                    meta for name, meta in doc["graph_module"]["graph"]["tensor_values"].items() if name == "x"
                )["sizes"][0].update(as_int=2**31 + 8),
            ),
        ),
        ["node x", "2,147,483,647"],
    ),
    "second_model": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}models/other.json", b"{}")]),
        ["2 models"],
    ),
    "model_in_a_subfolder": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}models/sub/model.json", b"{}")]),
        ["models/sub/model.json"],
    ),
    "duplicate_member": lambda tmp, marker: (
        build(
            tmp / "crafted.pt2",
            extra=[
                (
                    member("model_weights_config.json"),
                    json.dumps(
                        {"config": {"w": dict(path_name="weight_0", is_param=False, use_pickle=True, tensor_meta=None)}}
                    ).encode(),
                )
            ],
        ),
        ["model_weights_config.json", "appears more than once"],
    ),
    "aot_inductor_library": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}data/aotinductor/model/model.so", b"\x7fELF")]),
        ["data/aotinductor/model/model.so", "native code"],
    ),
    "zip_bomb_extra_member": None,  # filled by the bomb fixture in the test
    "zip_bomb_weight": deflated_bomb_weight,
    "huge_declared_size": lambda tmp, marker: (
        declared_size(build(tmp / "crafted.pt2"), member("weights/weight_0"), 0xFFFF_FFF0),
        ["weight_0", "declares"],
    ),
    "absurd_member_count": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}extra/{i}", b"") for i in range(100_001)]),
        ["100018 members"],
    ),
    "path_traversal": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(f"{prefix()}../../escape", b"x")]),
        ["../../escape", "outside"],
    ),
    "absolute_name": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[("/tmp/escape", b"x")]),
        ["/tmp/escape", "outside"],
    ),
    "symbolic_link": lambda tmp, marker: (
        build(tmp / "crafted.pt2", extra=[(symlink_info(f"{prefix()}extra/link"), b"/etc/passwd")]),
        ["extra/link", "symbolic link"],
    ),
    "truncated_zip": lambda tmp, marker: (
        tmp.joinpath("crafted.pt2").write_bytes(SAMPLE.read_bytes()[: SAMPLE.stat().st_size // 2])
        and tmp / "crafted.pt2",
        ["not a .pt2 archive"],
    ),
    "truncated_central_directory": lambda tmp, marker: (
        tmp.joinpath("crafted.pt2").write_bytes(SAMPLE.read_bytes()[:-200]) and tmp / "crafted.pt2",
        ["cannot load the .pt2 archive"],
    ),  # zipfile finds the sample inputs' own directory instead
    "not_a_zip": lambda tmp, marker: (
        tmp.joinpath("crafted.pt2").write_bytes(payload(marker)[:0] + b"\x80\x04hello" * 100) and tmp / "crafted.pt2",
        ["not a .pt2 archive"],
    ),
    "empty_zip": lambda tmp, marker: (build(tmp / "crafted.pt2", lambda name, data: None), ["archive_format"]),
    "empty_file": lambda tmp, marker: (
        tmp.joinpath("crafted.pt2").write_bytes(b"") or tmp / "crafted.pt2",
        ["not a .pt2 archive"],
    ),
    "nested_archive": lambda tmp, marker: (
        build(tmp / "crafted.pt2", lambda name, data: None, extra=[("inner.pt2", SAMPLE.read_bytes())]),
        ["archive_format"],
    ),
    "wrong_archive_format": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("archive_format", b"zip")),
        ["archive format"],
    ),
    "wrong_archive_version": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("archive_version", b"99")),
        ["archive version"],
    ),
    "huge_weight_over_an_empty_file": lambda tmp, marker: huge_weight(tmp, b""),
    "huge_weight_over_a_tiny_file": lambda tmp, marker: huge_weight(tmp, bytes(16)),
    "overflowing_weight_shape": lambda tmp, marker: (
        build(tmp / "crafted.pt2", weight_meta(set_sizes([1 << 62, 1 << 62], [1 << 62, 1]))),
        ["layers.0.weight"],
    ),
    "negative_weight_shape": lambda tmp, marker: (
        build(tmp / "crafted.pt2", weight_meta(set_sizes([-1, 256]))),
        ["layers.0.weight"],
    ),
    "missing_weight_file": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("weights/weight_0", None)),
        ["weight_0"],
    ),
    "deeply_nested_config": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("model_weights_config.json", b"[" * 100_000 + b"]" * 100_000)),
        ["model_weights_config.json"],
    ),
    "config_not_an_object": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("model_weights_config.json", b'{"config": [1, 2]}')),
        ["model_weights_config.json"],
    ),
    "deeply_nested_model": lambda tmp, marker: (
        build(tmp / "crafted.pt2", replaced("models/model.json", b"[" * 100_000 + b"]" * 100_000)),
        ["crafted.pt2"],
    ),
    "encrypted_member": lambda tmp, marker: (
        encrypted(build(tmp / "crafted.pt2"), member("model_weights_config.json")),
        ["encrypted"],
    ),
    "lzma_member": lambda tmp, marker: (
        build(tmp / "crafted.pt2", compress=zipfile.ZIP_LZMA),
        ["LZMA", "torch.export.save"],
    ),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # zipfile warns about the duplicate name it writes
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_hostile_archive_is_refused_in_one_line(tmp_path, variant, request):
    marker = tmp_path / "marker"
    if variant == "zip_bomb_extra_member":
        archive, needles = request.getfixturevalue("bomb"), ["extra/blob", "expands"]
    else:
        archive, needles = VARIANTS[variant](tmp_path, marker)
    assert archive.stat().st_size < 16 << 20  # a small file, whatever it claims
    code, stderr, peak = compile_measured(archive, tmp_path / "out.pte")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("devplan: error:"), stderr
    for needle in [archive.name, *needles]:
        assert needle in lines[0], (needle, lines[0])
    assert "re-export" in lines[0] or "export the model" in lines[0] or "save" in lines[0], lines[0]
    assert peak is not None, "the child did not report its peak memory"
    assert peak < PEAK_RSS, f"peak RSS {peak >> 20} MiB"
    assert not marker.exists() and not (tmp_path / "out.pte").exists()


def test_an_op_given_a_number_for_its_tensor_is_one_line(tmp_path):
    """Found by the .pt2 fuzz run: relu given an int where its schema takes a tensor failed
    inside the fold stage as an internal error (exit 3)."""
    archive = build(
        tmp_path / "crafted.pt2",
        edit_json(
            "models/model.json",
            lambda doc: next(node for node in doc["graph_module"]["graph"]["nodes"] if "relu" in node["target"])[
                "inputs"
            ][0].update(arg={"as_int": 3}),
        ),
    )
    code, stderr, _ = compile_measured(archive, tmp_path / "out.pte")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "node relu" in lines[0] and "cannot run on the arguments" in lines[0], (
        stderr
    )


def test_a_program_without_a_call_signature_is_one_line(tmp_path):
    """Found by the .pt2 fuzz run: a module call graph whose root has no signature failed in
    the split stage as an internal error (exit 3)."""
    archive = build(
        tmp_path / "crafted.pt2",
        edit_json("models/model.json", lambda doc: doc["graph_module"]["module_call_graph"][0].update(signature=None)),
    )
    code, stderr, _ = compile_measured(archive, tmp_path / "out.pte")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "crafted.pt2" in lines[0] and "no call signature" in lines[0], stderr
