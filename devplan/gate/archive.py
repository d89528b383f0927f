"""A .pt2 archive checked before torch reads it.

torch.export.load trusts its archive (it unpickles members, evaluates expression strings with
sympy, and unlifting a loaded program execs source built from its guards), so devplan checks
the archive first, as an allowlist of what torch.export.save writes for one plain program
(devplan.gate.allowlist): every member by name, the model's JSON and payload configs field by field,
and every string torch would evaluate in a small grammar (devplan.gate.expressions). Whatever is not
on the list is refused in one line naming the archive and the member or field. The zip itself
is held to bounds (member count, sizes, expansion)."""

from __future__ import annotations

import json
import re
import struct
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

from devplan.errors import DevplanError, first_line
from devplan.gate import allowlist

# the payload configs, by member name, and the prefix of the plain tensor files each names
_PAYLOAD_CONFIGS = {
    f"data/weights/{allowlist.MODEL}_weights_config.json": "weight_",
    f"data/constants/{allowlist.MODEL}_constants_config.json": "tensor_",
}
_MAX_MEMBERS = 100_000  # one per weight or constant and a dozen more; a real model has thousands at most
# torch.export.save stores members uncompressed; re-zipped weights deflate about 1.1 times and
# graph JSON about 10 times, while a zip bomb expands a thousandfold
_MAX_EXPANSION = 32
_LINK = 0o120000  # a symbolic link's file type in a member's Unix mode


class _Refusal:
    """Builds the one-line refusals of an archive, each naming the archive and what to do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, what: str, advice: str = "re-export the model with torch.export.save") -> DevplanError:
        return DevplanError(f"{self.path}: {what}; {advice}")

    def member(self, name: str, what: str, advice: str = "re-export the model with torch.export.save") -> DevplanError:
        return self(f"archive member {allowlist.shown(name)} {what}", advice)

    def pickle(self, name: str, what: str) -> DevplanError:
        return self.member(name, f"is {what}, which loading would unpickle, and unpickling can run code")


def check_archive(path: Path) -> None:
    """Refuse, before torch reads the archive, anything torch.export.save would not have
    written for one plain program: members it does not write (legacy and pickled state,
    native code, a second or renamed model), JSON fields outside its schema, expressions
    outside export's grammar, pickled weights, constants or sample inputs; anything that makes
    devplan's checks and torch's reader see different members; and sizes that would make
    loading take more memory than the archive's real weights."""
    refuse = _Refusal(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = [info.filename for info in infos]
            if "version" in names:
                raise refuse("an old-format .pt2 archive, which torch loads by unpickling")
            root = names[0].split("/")[0] + "/" if names and "/" in names[0] else ""
            _check_members(refuse, infos, root)
            with path.open("rb") as stream:
                _check_spans(refuse, infos, getattr(archive, "start_dir", path.stat().st_size), stream)
            _check_layout(refuse, root, names)
            sizes = {info.filename: info.file_size for info in infos}
            named = set()
            for config, prefix in _PAYLOAD_CONFIGS.items():
                named |= _check_payload_config(refuse, archive, root + config, prefix, sizes)
            _check_known(refuse, root, names, named)
            _check_document(refuse, f"{root}models/{allowlist.MODEL}.json", archive, "ExportedProgram")
            inputs = f"{root}data/sample_inputs/{allowlist.MODEL}.pt"
            _check_sample_inputs(refuse, inputs, archive.read(inputs))
    except (
        zipfile.BadZipFile,
        ValueError,
        AttributeError,
        TypeError,
        OSError,
        RecursionError,
        NotImplementedError,
        EOFError,
    ) as error:  # EOFError: a deflated stream cut short
        raise refuse(f"cannot load the .pt2 archive ({first_line(error)})") from None


def _check_members(refuse: _Refusal, infos: list[zipfile.ZipInfo], root: str) -> None:
    """Members that devplan's zipfile and torch's reader would read alike, all in the archive's
    folder `root` (torch reads only that one), each within bounds."""
    if len(infos) > _MAX_MEMBERS:
        raise refuse(f"the archive holds {len(infos)} members, more than the {_MAX_MEMBERS} devplan reads")
    repeated = [name for name, count in Counter(i.filename for i in infos).items() if count > 1]
    if repeated:  # zipfile reads the last copy, torch's reader the first: what we check is not what loads
        raise refuse.member(repeated[0], "appears more than once, so devplan and torch would read different bytes")
    for info in infos:
        name = info.filename
        parts = name.split("/")
        if not name.startswith(root) or ".." in parts or "\\" in name or name.startswith("/"):
            raise refuse.member(name, f"names a path outside the archive's folder {root}")
        if (info.external_attr >> 16) & 0o170000 == _LINK:
            raise refuse.member(name, "is a symbolic link, which no .pt2 holds")
        if info.flag_bits & 1:
            raise refuse.member(name, "is encrypted")
        _check_size(refuse, info, name)


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the lengths of the member's name and extra field


def _check_spans(
    refuse: _Refusal, infos: list[zipfile.ZipInfo], directory: int, stream: BinaryIO, within: str = ""
) -> None:
    """Each member's bytes lie apart from every other's and before the central directory (at
    byte `directory` of `stream`): members pointing at one stored entry cost its size once each
    when torch reads them (forty at one 24 MB entry: a 1.23 GB peak), and a member claiming more
    than the archive holds is read to its end (EOFError). A span runs from its local header
    through its stored bytes, which start where the local header's own name and extra lengths
    say: both zipfile and torch's reader skip those, so a local extra field of 64 KB moves the
    bytes they read past the end (EOFError) although the directory's sizes fit. Members of a
    zip inside the archive are named after `within`, the member holding it."""
    previous: zipfile.ZipInfo | None = None
    end = 0
    for info in sorted(infos, key=lambda i: i.header_offset):
        name = within + info.filename
        if previous is not None and info.header_offset < end:
            raise refuse.member(
                name,
                f"overlaps member {allowlist.shown(within + previous.filename)} (its bytes "
                f"start at byte {info.header_offset}, inside that member's)",
            )
        stream.seek(info.header_offset)
        header = stream.read(_LOCAL_HEADER.size)
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise refuse.member(name, f"has no local header at byte {info.header_offset}, where the directory puts it")
        _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        end = start + info.compress_size
        if end > directory:
            after = (
                f" (after its local header's {name_length + extra_length}-byte name and extra field)"
                if extra_length > 0xFF
                else ""
            )  # the usual extra fields are a few dozen bytes
            raise refuse.member(
                name,
                f"claims {info.compress_size} stored bytes from byte {start}{after}, "
                f"past the archive's end of data at byte {directory}",
            )
        previous = info


def _check_size(refuse: _Refusal, info: zipfile.ZipInfo, name: str) -> None:
    """A member holds what it declares (torch allocates the declared size) and expands no more
    than real data does (torch reads every member it uses whole)."""
    size, stored = info.file_size, info.compress_size
    if info.compress_type == zipfile.ZIP_STORED:
        if size != stored:
            raise refuse.member(name, f"declares {size} bytes but stores {stored}")
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        if size > _MAX_EXPANSION * max(stored, 1024):
            raise refuse.member(
                name,
                f"expands from {stored} to {size} bytes (more than {_MAX_EXPANSION} times)",
                "re-export the model with torch.export.save, which stores members as they are",
            )
    else:
        method = {zipfile.ZIP_BZIP2: "BZIP2", zipfile.ZIP_LZMA: "LZMA"}.get(info.compress_type, str(info.compress_type))
        raise refuse.member(name, f"is compressed with {method}, which torch's reader cannot read")


def _check_layout(refuse: _Refusal, root: str, names: list[str]) -> None:
    """The members torch.export.load reads by name: the folder is one name, one model, the
    fixed members it needs; what torch would unpickle or run as native code gets its own
    message before any other member is looked at."""
    if root and not allowlist.safe_component(root[:-1]):
        raise refuse.member(root, "is a folder name that torch.export.save does not write")
    inner = [name[len(root) :] for name in names]
    models = [name for name in inner if name.startswith("models/")]
    if len(models) > 1:
        raise refuse(
            f"the archive holds {len(models)} models ({', '.join(map(allowlist.shown, models[:3]))})",
            "devplan compiles one: save each program to its own .pt2",
        )
    for name in inner:
        if name.startswith("data/aotinductor/"):
            raise refuse.member(
                root + name,
                "is AOTInductor output, native code that loading would run",
                "devplan compiles exported programs: save one with torch.export.save",
            )
        if re.fullmatch(r"data/(weights|constants)/.*\.pt", name, re.DOTALL):  # torch unpickles whole state files
            raise refuse.pickle(root + name, "a legacy weights or constants file")
    for name, needed in allowlist.FIXED.items():
        if needed and name not in inner:
            raise refuse(
                f"cannot load the .pt2 archive (it has no {name} member, so torch.export.save did not write it)"
            )


def _check_known(refuse: _Refusal, root: str, names: list[str], named: set[str]) -> None:
    """Every member one that torch.export.save writes (torch reads some by patterns: a model
    named other than `model` brings its own sample inputs and configs), its weight and
    constant files those the configs name."""
    for name in names:
        kind = allowlist.member_kind(name[len(root) :])
        if kind is None:
            what = "is a model other than 'model', the one" if name.startswith(f"{root}models/") else "is not a member"
            raise refuse.member(name, f"{what} torch.export.save writes")
        if kind == "payload" and name not in named:
            raise refuse.member(name, "is a weight or constant that no config names")


def _check_document(refuse: _Refusal, name: str, archive: zipfile.ZipFile, schema: str) -> Any:
    """The JSON member `name` as torch's schema class `schema` has it; its document."""
    document = _json(refuse, archive, name)
    _check_ranks(refuse, name, document)
    try:
        allowlist.check_document(schema, document)
    except allowlist.Unexpected as unexpected:
        raise refuse.member(name, f"field {unexpected.where} {unexpected.what}") from None
    return document


# ExecuTorch's runtime holds tensors of up to this many dimensions (kTensorDimensionLimit in
# runtime/core/exec_aten/util/tensor_dimension_limit.h); torch builds a symbol per size first,
# so 2 million sizes took 151 s and 2.1 GB before anything else could refuse them
MAX_RANK = 16


def _check_ranks(refuse: _Refusal, name: str, document: Any) -> None:
    """Every tensor meta in `document` (an object with sizes, strides and a dtype, wherever the
    schema nests it) of at most MAX_RANK dimensions; walked with a stack, never recursion."""
    # (value, its path as nested (parent, key) pairs, rendered only to refuse)
    stack: list[tuple[Any, Any]] = [(document, None)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, list):
            stack += [(item, where) for item in value]
        elif isinstance(value, dict):
            sizes = value.get("sizes")
            if isinstance(sizes, list) and "dtype" in value and len(sizes) > MAX_RANK:
                raise refuse.member(
                    name,
                    f"field {_path(where)} gives a tensor {len(sizes)} dimensions, more than "
                    f"the {MAX_RANK} ExecuTorch's runtime holds",
                )
            stack += [(item, (where, key)) for key, item in value.items() if key != "sizes"]


def _path(where: Any) -> str:
    keys = []
    while where is not None:
        where, key = where
        keys.append(str(key))
    return ".".join(reversed(keys)) or "the top level"


def _json(refuse: _Refusal, archive: zipfile.ZipFile, name: str) -> Any:
    try:
        return json.loads(archive.read(name))
    except (ValueError, RecursionError) as error:
        raise refuse.member(name, f"is not JSON that torch can read ({first_line(error)})") from None


def _check_payload_config(
    refuse: _Refusal, archive: zipfile.ZipFile, name: str, prefix: str, sizes: dict[str, int]
) -> set[str]:
    """A weights or constants config lists plain tensors only, each lying inside its data member:
    torch unpickles the others, makes zeros of an empty member's declared shape and fails past
    a short member's end. Returns the data members it names."""
    config = _check_document(refuse, name, archive, "PayloadConfig")["config"]
    folder = name.rpartition("/")[0] + "/"
    for fqn, meta in config.items():
        if meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(prefix):
            raise refuse.pickle(name, f"{fqn!r}, a pickled object")
        data, needed = folder + meta["path_name"], _tensor_bytes(meta.get("tensor_meta"))
        if needed is None:
            raise refuse.member(name, f"gives {fqn!r} a malformed shape, stride or dtype")
        device = _device_type(meta.get("tensor_meta"))
        if device not in _DATA_DEVICES:  # torch makes a meta tensor, which holds no data, for the weight
            raise refuse.member(name, f"places {fqn!r} on device {device!r}, where it holds no data")
        if data not in sizes:
            raise refuse.member(name, f"places {fqn!r} in {data}, which the archive lacks")
        if needed > sizes[data]:
            raise refuse.member(name, f"gives {fqn!r} {needed} bytes of {data}, which holds {sizes[data]}")
    return {folder + meta["path_name"] for meta in config.values()}


# where a saved weight's bytes can be loaded to; "meta" (no data at all) is not
_DATA_DEVICES = ("cpu", "cuda")


def _device_type(meta: Any) -> object:
    try:
        return meta["device"]["type"]
    except (KeyError, TypeError):
        return None


def _tensor_bytes(meta: Any) -> int | None:
    """Bytes of its storage that a serialized tensor spans, or None when its sizes, strides,
    offset or dtype are malformed (symbolic, negative or unknown)."""
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    try:
        sizes = [entry["as_int"] for entry in meta["sizes"]]
        strides = [entry["as_int"] for entry in meta["strides"]]
        offset, dtype = meta["storage_offset"]["as_int"], _SERIALIZE_TO_TORCH_DTYPE[meta["dtype"]]
    except (KeyError, TypeError):
        return None
    if len(sizes) != len(strides) or not all(type(n) is int and n >= 0 for n in (*sizes, *strides, offset)):
        return None
    if 0 in sizes:
        return 0
    spanned: int = (offset + sum((size - 1) * stride for size, stride in zip(sizes, strides)) + 1) * dtype.itemsize
    return spanned


def _check_sample_inputs(refuse: _Refusal, name: str, data: bytes) -> None:
    """Sample inputs are a torch.save zip inside the archive: its members are held to the same
    bounds before a weights-only load, and whatever that load refuses torch would unpickle."""
    import io

    import torch

    stream = io.BytesIO(data)
    with zipfile.ZipFile(stream) as inner:
        for info in inner.infolist():
            _check_size(refuse, info, f"{name}/{info.filename}")
        # torch.load reads each record by the sizes its directory declares
        _check_spans(refuse, inner.infolist(), inner.start_dir, stream, f"{name}/")
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception:  # anything a weights-only load rejects would be unpickled in full
        raise refuse.pickle(name, "sample inputs that are not plain tensors") from None
