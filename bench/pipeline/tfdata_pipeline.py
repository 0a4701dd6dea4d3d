#!/usr/bin/env python3
"""Peer: tf.data (tensorflow-cpu) doing the same work as the others, on its fast path.

list_files (shuffled) -> read_file -> extract_jpeg_shape + sample_distorted_bounding_box
(area 0.08..1, aspect 3/4..4/3, the RandomResizedCrop box) -> decode_and_crop_jpeg (decodes
only the crop) -> resize(224x224, bilinear) -> random_flip_left_right -> normalize
(ImageNet mean/std) -> batch(64) -> prefetch(AUTOTUNE); every map with
num_parallel_calls=AUTOTUNE, private thread pool of `--threads` (= cores).
Output is float32 [64,224,224,3] (TensorFlow's HWC convention; no transpose to CHW).
Run with /work/main/.venv-peers/bin/python (bench/pipeline/install-peers.sh).
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer_common.add_args(ap)
    args = ap.parse_args()

    import tensorflow as tf

    files = peer_common.list_images(args.data)
    classes = sorted({os.path.basename(os.path.dirname(p)) for p, _ in files})
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(classes),
                                            tf.range(len(classes), dtype=tf.int64)), -1)
    mean = tf.constant([0.485, 0.456, 0.406], dtype=tf.float32)
    std = tf.constant([0.229, 0.224, 0.225], dtype=tf.float32)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])

    def parse(path):
        raw = tf.io.read_file(path)
        shape = tf.io.extract_jpeg_shape(raw)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=whole, min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        oy, ox, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        img = tf.image.decode_and_crop_jpeg(raw, tf.stack([oy, ox, h, w]), channels=3)
        img = tf.image.resize(img, [224, 224], method="bilinear")  # float32
        img = tf.image.random_flip_left_right(img)
        img = (img / 255.0 - mean) / std
        label = table.lookup(tf.strings.split(path, os.sep)[-2])
        return img, label

    pattern = os.path.join(args.data, "*", "*.jpg")
    ds = tf.data.Dataset.list_files(pattern, shuffle=True, seed=1)
    ds = ds.repeat()
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(args.batch)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = args.threads
    ds = ds.with_options(opts)

    def endless():
        for images, labels in ds:
            yield images

    r = peer_common.measure(endless(), args.warmup, args.batches, lambda t: int(t.shape[0]))
    r.update({
        "name": "tfdata",
        "what": "tf.data: list_files -> read_file -> sample_distorted_bounding_box + "
                "decode_and_crop_jpeg -> resize -> flip -> normalize -> batch -> prefetch",
        "version": f"tensorflow-cpu {tf.__version__}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": len(files),
        "output": "float32 [64,224,224,3]",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
