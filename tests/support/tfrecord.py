"""TFRecord shards of the built-in models' schema (trainer/dtr_trainer/records.py) written without TensorFlow, for
tests that run in the operator's environment: a tf.train.Example encoded by hand (protobuf's wire format) in
TFRecord's framing (length, masked CRC-32C of it, data, masked CRC-32C of it). Imported as `support.tfrecord`."""

from __future__ import annotations

import struct

import numpy as np

IMAGE_SIZE = 28 * 28
CLASSES = 10
_CRC32C_POLY = 0x82F63B78  # Castagnoli, reflected
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _CRC32C_POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc(length)) + record + struct.pack("<I", masked_crc(record))


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # int64 as protobuf encodes a negative one
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def example(image: np.ndarray, label: int) -> bytes:
    """tf.train.Example{image: FloatList(784), label: Int64List(1)}, as records.example serializes it."""
    floats = np.asarray(image, "<f4").ravel()
    if floats.size != IMAGE_SIZE:
        raise ValueError(f"an image has {IMAGE_SIZE} values, not {floats.size}")
    image_feature = _field(2, _field(1, floats.tobytes()))  # Feature.float_list{value: packed}
    label_feature = _field(3, _field(1, _varint(int(label))))  # Feature.int64_list{value: packed}
    entries = _field(1, _field(1, b"image") + _field(2, image_feature)) + \
        _field(1, _field(1, b"label") + _field(2, label_feature))  # fmt: skip
    return _field(1, entries)  # Example.features{feature: map entries}


def shard(images: np.ndarray, labels: np.ndarray) -> bytes:
    return b"".join(frame(example(x, y)) for x, y in zip(images, labels, strict=True))


def synthetic(count: int, seed: int = 7, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """`count` 28x28 images in [0, 1] of ten classes, each a random prototype plus noise: learnable in an epoch or
    two, as the trainer's own `synthetic` dataset."""
    rng = np.random.RandomState(seed)
    prototypes = rng.uniform(0.0, 1.0, size=(CLASSES, IMAGE_SIZE))
    labels = rng.randint(0, CLASSES, size=count)
    images = np.clip(prototypes[labels] + rng.normal(0.0, noise, size=(count, IMAGE_SIZE)), 0.0, 1.0)
    return images.astype(np.float32), labels.astype(np.int64)


def dataset(train: int, evaluation: int, shards: int, seed: int = 7) -> dict[str, bytes]:
    """A dataset's files as records.write names them: train-0000i-of-0000n.tfrecord and eval-00000-of-00001.tfrecord."""
    x, y = synthetic(train + evaluation, seed)
    files = {f"train-{i:05d}-of-{shards:05d}.tfrecord": shard(x[i:train:shards], y[i:train:shards])
             for i in range(shards)}  # fmt: skip
    files["eval-00000-of-00001.tfrecord"] = shard(x[train:], y[train:])
    return files
