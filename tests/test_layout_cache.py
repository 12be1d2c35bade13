"""The decoded layout's file (navi_nb/world/layout_cache.py): written once, mapped read-only with the
decoded arrays' exact bytes, and a damaged file (truncated, a flipped payload byte, a bad header, another
world's) is detected, decoded again and replaced rather than trusted."""

import numpy as np
import pytest

from navi_nb.world import layout_cache
from navi_nb.world.compiler import compile_scene
from navi_nb.world.world_set import WorldSet, decode_packed


def compiled_scene(name, res, seed):
    """A World of its own (the session's shared worlds would keep views of these tests' files)."""
    return compile_scene(name, resolution=res, seed=seed)


def _same(packed, worlds):
    want = decode_packed(worlds)
    for name in layout_cache.ARRAY_NAMES:
        got = getattr(packed, "iparams" if name == "iparams" else name)
        assert got.dtype == want[name].dtype and got.shape == want[name].shape, name
        assert got.tobytes() == want[name].tobytes(), name


@pytest.mark.parametrize("specs", [[("box", 32, 0)], [("box", 32, 0), ("house", 32, 1), ("box", 32, 0)]])
def test_mapped_layout_is_the_decoded_one(tmp_path, specs):
    worlds = [compiled_scene(n, r, s) for n, r, s in specs]
    ws = WorldSet(worlds)
    first = ws.map_layouts(tmp_path)
    assert first.mapped is not None and "missing; decoded and written" in first.map_note
    again = WorldSet(worlds).map_layouts(tmp_path)
    assert again.mapped == first.mapped and again.map_note is None  # mapped, not decoded
    assert [p.name for p in tmp_path.iterdir()] == [first.mapped.name]
    _same(again, worlds)
    assert not any(a.flags.writeable for a in again.arrays[:5])
    with pytest.raises(ValueError):
        again.child[0] = 0
    path, pss, rss = layout_cache.mapping_of(again.leaf_dist)
    assert path == str(again.mapped) and 0 < pss <= rss
    assert layout_cache.mapping_of(np.zeros(3)) is None or layout_cache.mapping_of(np.zeros(3))[0] != path


def _damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) - 100]
    elif how == "payload byte":
        data[-70] ^= 0x40
    elif how == "magic":
        data[:8] = b"NOTALAY1"
    elif how == "header":
        data[16:40] = b"{" * 24
    elif how == "empty":
        data = bytearray()
    path.unlink()  # a new file: rewriting a mapped file in place would pull pages from under its mapping
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how, why",
    [
        ("truncated", "bytes, expected"),
        ("payload byte", "digest mismatch"),
        ("magic", "not a layout file"),
        ("header", "unreadable"),
        ("empty", "not a layout file"),
    ],
)
def test_a_damaged_layout_file_is_rebuilt(tmp_path, how, why):
    worlds = [compiled_scene("box", 32, 0)]
    path = WorldSet(worlds).map_layouts(tmp_path).mapped
    good = path.read_bytes()
    _damage(path, how)
    packed = WorldSet(worlds).map_layouts(tmp_path)
    assert why in packed.map_note and "decoded and written" in packed.map_note
    assert packed.mapped == path and path.read_bytes() == good  # replaced by a good one
    _same(packed, worlds)


def test_another_worlds_file_under_the_name_is_rebuilt(tmp_path):
    box, house = [compiled_scene("box", 32, 0)], [compiled_scene("house", 32, 1)]
    path = WorldSet(box).map_layouts(tmp_path).mapped
    other = WorldSet(house).map_layouts(tmp_path).mapped
    other.replace(path)  # the house's file under the box's name
    packed = WorldSet(box).map_layouts(tmp_path)
    assert "another world's layout" in packed.map_note
    _same(packed, box)


def test_an_unwritable_folder_decodes_in_memory(tmp_path):
    (tmp_path / "f").write_text("a file where the folder should be")
    packed = WorldSet([compiled_scene("box", 32, 0)]).map_layouts(tmp_path / "f" / "layouts")
    assert packed.mapped is None and "cannot write it" in packed.map_note
    _same(packed, [compiled_scene("box", 32, 0)])


@pytest.mark.parametrize(
    "edit",
    [
        {"name": "child", "dtype": "<u4"},  # the same bytes read as other values
        {"name": "leaf_dist", "shape_delta": -1},  # one value fewer
        {"name": "top_code", "offset_delta": 64},  # the array's bytes read from the next 64
        {"name": "leaf_sem", "rename": "leaf_dist"},  # two arrays under one name
    ],
)
def test_an_edited_array_table_with_the_payload_and_digest_kept_is_rebuilt(tmp_path, edit):
    """The digest covers the header's table of dtypes, shapes and offsets, not the payload alone: an edit
    of the table alone would read the right bytes as other arrays."""
    import json

    worlds = [compiled_scene("box", 32, 0)]
    path = WorldSet(worlds).map_layouts(tmp_path).mapped
    good = path.read_bytes()
    n = int.from_bytes(good[8:16], "little")
    header, payload = json.loads(good[16 : 16 + n]), good[16 + n :]
    e = next(e for e in header["arrays"] if e["name"] == edit["name"])
    e["dtype"] = edit.get("dtype", e["dtype"])
    e["shape"] = [e["shape"][0] + edit.get("shape_delta", 0)] + e["shape"][1:]
    e["offset"] += edit.get("offset_delta", 0)
    e["name"] = edit.get("rename", e["name"])
    head = json.dumps(header).encode()
    head += b" " * (-(16 + len(head)) % 64)
    path.unlink()
    path.write_bytes(good[:8] + len(head).to_bytes(8, "little") + head + payload)
    packed = WorldSet(worlds).map_layouts(tmp_path)
    assert "digest mismatch" in packed.map_note and path.read_bytes() == good
    _same(packed, worlds)
