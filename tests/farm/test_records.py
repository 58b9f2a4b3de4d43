"""A tile's record read by name is the store's six uint32 fields, in their stored order, byte for
byte: stores written before the records had names read the same, and the other way round."""
import numpy as np

from farm.records import FIELD_COUNT, RECORD, TileRecord, as_fields, as_records, has_samples


def test_the_fields_are_the_stored_ones_in_their_order():
    # The layout every store format has had (docs/store.md): changing it breaks stores on disk.
    assert TileRecord._fields == ("folded", "state_crc", "next_crc", "tail_passes", "tail_spp", "tail_crc")
    assert FIELD_COUNT == 6 and RECORD.itemsize == 24
    assert all(RECORD.fields[name][0] == np.uint32 for name in TileRecord._fields)


def test_records_are_a_view_of_the_stored_fields():
    fields = np.arange(2 * 3 * 4 * 6, dtype=np.uint32).reshape(2, 3, 4, 6)
    records = as_records(fields)
    assert records.shape == (2, 3, 4) and np.shares_memory(records, fields)
    assert records.tobytes() == fields.tobytes()  # what a digest of them hashes
    for i, name in enumerate(TileRecord._fields):
        np.testing.assert_array_equal(records[name], fields[..., i])
    assert TileRecord.of(records[1, 2, 3]) == TileRecord(*fields[1, 2, 3].tolist())
    np.testing.assert_array_equal(as_fields(records), fields)
    np.testing.assert_array_equal(as_fields(records[1]), fields[1])


def test_a_tile_record_is_a_copy_and_goes_back_whole():
    records = np.zeros((2, 2), RECORD)
    record = TileRecord.of(records[0, 1])._replace(folded=3, tail_passes=2, tail_spp=40, tail_crc=7)
    assert not as_fields(records).any()  # taking it out wrote nothing back
    records[0, 1] = record.without_tail()
    assert TileRecord.of(records[0, 1]) == TileRecord(folded=3)
    np.testing.assert_array_equal(has_samples(records), [[False, True], [False, False]])
