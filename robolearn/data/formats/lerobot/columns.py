"""Parquet columns as LeRobot's Hugging Face features store them: numbers (scalars or fixed-size lists) and
embedded PNG images, converted to arrow for writing and back to numpy for reading.

Both directions live here so that one file shows the column encoding LeRobot's readers expect.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robolearn.errors import DatasetError

if TYPE_CHECKING:
    import pyarrow as pa


def hf_feature(kind: str, dtype: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """The ``datasets`` (4.x) feature of a column, as the parquet's ``huggingface`` schema metadata records it, so
    that ``datasets.load_dataset("parquet")`` (the Hub viewer) sees images as images."""
    if kind == "image":
        return {"_type": "Image"}
    feature: dict[str, Any] = {"dtype": dtype, "_type": "Value"}
    if shape == (1,):
        return feature
    for size in reversed(shape):
        feature = {"feature": feature, "length": size, "_type": "List"}
    return feature


def array_column(values: np.ndarray, shape: tuple[int, ...]) -> pa.Array:
    """A parquet column as LeRobot's HF features store it: a scalar for shape (1,), else fixed-size lists."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if shape == (1,):
        return pa.array(values.reshape(-1))
    column = pa.array(values.reshape(-1))
    for size in reversed(shape):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column


def encode_png(image: np.ndarray) -> bytes:
    """One [H, W, C] uint8 image (C 1 or 3) as PNG bytes: lossless, as ``datasets.Image()`` embeds it."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buffer, format="PNG")
    return buffer.getvalue()


def png_column(images: np.ndarray) -> pa.Array:
    """``datasets.Image()`` storage: struct<bytes, path> with the PNG bytes and no path (LeRobot embeds images)."""
    import pyarrow as pa

    encoded = pa.array([encode_png(im) for im in images], type=pa.binary())
    return pa.StructArray.from_arrays([encoded, pa.nulls(len(images), pa.string())], names=["bytes", "path"])


def column_array(column: pa.ChunkedArray | pa.Array, rows: int, shape: Sequence[int], file: Path,
                 key: str) -> np.ndarray:
    """A (possibly nested-list) arrow column as an array [rows, *shape]; shape mismatches name the file and key."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    while True:
        if arr.null_count:
            raise DatasetError(f"{file}: column {key!r} has missing values (nulls); fill or drop those frames")
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
            arr = arr.flatten()
        else:
            break
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)):
        raise DatasetError(f"{file}: column {key!r} holds {arr.type}, not numbers; fix meta/info.json's features")
    values = arr.to_numpy(zero_copy_only=False)
    size = int(np.prod(shape))
    if values.size != rows * size:
        per = values.size / rows if rows else values.size
        raise DatasetError(f"{file}: column {key!r} holds {per:g} values per row, meta/info.json features[{key!r}] "
                           f"has shape {list(shape)}; fix info.json or regenerate the data")
    return values.reshape(rows, *shape)


def decode_png(blob: Any, hwc: tuple[int, int, int], file: Path, key: str) -> np.ndarray:
    """One embedded image back as [H, W, C] uint8, checked against the feature's ``hwc``."""
    from PIL import Image

    if not isinstance(blob, bytes | bytearray):
        raise DatasetError(f"{file}: {key!r} holds no image bytes (a path-only image?); embed the images")
    try:
        with Image.open(io.BytesIO(blob)) as im:
            im.load()
            image = np.asarray(im.convert("RGB") if hwc[2] == 3 else im.convert("L"), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, zlib.error, Image.DecompressionBombError) as e:
        raise DatasetError(f"{file}: an image of {key!r} is corrupt ({type(e).__name__}: {e}); regenerate it") from None
    image = image.reshape(*image.shape[:2], -1)
    if image.shape != hwc:
        raise DatasetError(f"{file}: an image of {key!r} is {image.shape}, meta/info.json says {hwc} (H, W, C); fix "
                           "info.json or regenerate the images")
    return image


def image_hwc(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """(height, width, channels) of an image/video feature stored (H, W, C) or channels first."""
    shape = spec["shape"]
    names = spec.get("names")
    if isinstance(names, list) and names and str(names[0]).startswith("channel"):
        c, h, w = shape
    elif shape[-1] in (1, 3) or shape[0] not in (1, 3):
        h, w, c = shape
    else:
        c, h, w = shape
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    h = info.get("video.height", h) if isinstance(info.get("video.height"), int) else h
    w = info.get("video.width", w) if isinstance(info.get("video.width"), int) else w
    return int(h), int(w), int(c)
