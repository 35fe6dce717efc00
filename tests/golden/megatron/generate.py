"""Megatron-LM indexed-dataset fixtures, written and read by megatron-core itself.

  python generate.py                      writes sample_text_document.{bin,idx} next to this file
                                          with megatron-core's IndexedDatasetBuilder and reads it
                                          back with its IndexedDataset
  python generate.py --read-cpp PREFIX VOCAB
                                          reads, with megatron-core's IndexedDataset, a shard our
                                          C++ IndexedDatasetWriter wrote from the formula in
                                          cpp_document() and checks every token, the dtype and
                                          the index arrays

See README.md for the environment (megatron-core is imported without its package __init__,
which needs torch >= 2) and for the fixture's contents.
"""

import argparse
import importlib.util
import os
import sys
import types

import numpy


def import_megatron_indexed_dataset():
    # megatron/core/__init__.py pulls in the whole training stack (distributed, tensor
    # parallel, transformer engine) and fails on torch 1.13. indexed_dataset.py itself only
    # needs torch.utils.data.Dataset and megatron.core.utils, so the two package __init__
    # modules are replaced by empty namespace modules pointing at the installed files; the
    # module that reads and writes the format is megatron-core's own, unmodified.
    spec = importlib.util.find_spec("megatron")
    root = list(spec.submodule_search_locations)[0]
    for name, path in [("megatron", root), ("megatron.core", os.path.join(root, "core"))]:
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    import megatron.core.parallel_state  # noqa: F401  (breaks the utils <-> parallel_state import cycle)
    from megatron.core.datasets import indexed_dataset

    return indexed_dataset


# The fixture: documents as lists of sequences (Megatron's "sentences"). Document 1 has two
# sequences, as preprocess_data.py --split-sentences writes them, so doc_idx is not 0..N;
# document 2 is empty; document 3 spans the whole uint16 range, 65535 included.
FIXTURE_DOCUMENTS = [
    [[1, 2, 3, 4, 5]],
    [[10, 11, 12], [13, 14]],
    [[]],
    [[65535, 0, 32768, 255, 256]],
    [list(range(100, 140))],
]


def write_fixture(md, prefix):
    import torch

    builder = md.IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for document in FIXTURE_DOCUMENTS:
        for sequence in document:
            builder.add_item(torch.tensor(sequence, dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")

    dataset = md.IndexedDataset(prefix)
    sequences = [s for d in FIXTURE_DOCUMENTS for s in d]
    assert len(dataset) == len(sequences)
    assert dataset.index.dtype == numpy.uint16
    for i, sequence in enumerate(sequences):
        assert dataset[i].tolist() == sequence, (i, dataset[i], sequence)
    print(f"{prefix}: {len(sequences)} sequences, document_indices {dataset.document_indices.tolist()}")


def cpp_document(d, vocab):
    """Document d of the shard the C++ cross-check writes (tests/golden/megatron/README.md)."""
    length = (d * 7) % 13  # 0 for d = 0 and d = 13: empty documents included
    return [(d * 1009 + t * 31 + (vocab - 1 if t == 1 else 0)) % vocab for t in range(length)]


def read_cpp(md, prefix, vocab, num_docs=20):
    dataset = md.IndexedDataset(prefix)
    expected_dtype = numpy.uint16 if vocab <= 65536 else numpy.int32
    assert dataset.index.dtype == expected_dtype, (dataset.index.dtype, expected_dtype)
    assert len(dataset) == num_docs, len(dataset)
    assert dataset.document_indices.tolist() == list(range(num_docs + 1))
    for d in range(num_docs):
        got = dataset[d].tolist()
        assert got == cpp_document(d, vocab), (d, got, cpp_document(d, vocab))
        assert dataset.sequence_lengths[d] == len(got)
    print(f"{prefix}: megatron-core read {num_docs} documents, dtype {dataset.index.dtype.__name__}, all tokens equal")

    # Stronger: megatron-core's builder, given the same documents and dtype, writes the very
    # same bytes.
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref")
        builder = md.IndexedDatasetBuilder(ref + ".bin", dtype=expected_dtype)
        for d in range(num_docs):
            builder.add_item(torch.tensor(cpp_document(d, vocab), dtype=torch.int64))
            builder.end_document()
        builder.finalize(ref + ".idx")
        for ext in (".bin", ".idx"):
            with open(prefix + ext, "rb") as ours, open(ref + ext, "rb") as theirs:
                assert ours.read() == theirs.read(), f"{prefix}{ext} differs from megatron-core's"
    print(f"{prefix}: .bin and .idx byte-identical to megatron-core's IndexedDatasetBuilder output")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--read-cpp", nargs=2, metavar=("PREFIX", "VOCAB"))
    args = parser.parse_args()
    md = import_megatron_indexed_dataset()
    if args.read_cpp:
        read_cpp(md, args.read_cpp[0], int(args.read_cpp[1]))
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        write_fixture(md, os.path.join(here, "sample_text_document"))


if __name__ == "__main__":
    main()
