"""pyiceberg reads what hotgate tiered: SqlCatalog on hotgate's own SQLite catalog file,
or RestCatalog when the test runs hotgate against a REST catalog.

The rows equal what was written, the partition spec is day/bucket, and pyiceberg's
BucketTransform puts every sampled key in the bucket the hot tier acknowledged for it."""

import datetime as dt
import os

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
from pyiceberg.transforms import BucketTransform, DayTransform
from pyiceberg.types import StringType

import hotgate_client
from hotgate_client import FLIGHT

TOKEN = os.environ["HOTGATE_TOKEN"]

CLICKS = hotgate_client.log_table(
    "lake.clicks", ["id int64!", "user_id string!", "email string #pii", "ts timestamp_us!"],
    "user_id", 8,
)

START = dt.datetime(2026, 11, 29, 22, 0, tzinfo=dt.timezone.utc)


def put(client, rows):
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "user_id": pa.array([r[1] for r in rows], pa.string()),
            "email": pa.array([r[2] for r in rows], pa.string()),
            "ts": pa.array([r[3] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    return hotgate_client.put(client, flight.FlightDescriptor.for_path("lake", "clicks"), table, TOKEN)


def test_pyiceberg_reads_the_tiered_table():
    hotgate_client.create_table(CLICKS, TOKEN)
    client = flight.FlightClient(FLIGHT)
    # 240 rows over two days, one user per batch, so each ack names that user's bucket.
    written = []
    hot_bucket = {}
    for u in range(12):
        user = f"user-{u}"
        rows = [
            (u * 20 + i, user, f"{user}@example.com", START + dt.timedelta(minutes=17 * (u * 20 + i)))
            for i in range(20)
        ]
        acks = put(client, rows)
        buckets = {part["bucket"] for ack in acks for part in ack["parts"]}
        assert len(buckets) == 1, acks
        hot_bucket[user] = buckets.pop()
        written.extend(rows)

    status, report = hotgate_client.http("POST", "/v1/tables/lake.clicks/tier", TOKEN)
    assert status == 200, report
    assert report["records"] == len(written)

    table = catalog().load_table("lake.clicks")
    assert table.current_snapshot().snapshot_id == report["snapshot_id"]

    # The rows equal what was written.
    got = table.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == [r[0] for r in written]
    assert got.column("user_id").to_pylist() == [r[1] for r in written]
    assert got.column("email").to_pylist() == [r[2] for r in written]
    assert [t.astimezone(dt.timezone.utc) for t in got.column("ts").to_pylist()] == [r[3] for r in written]

    # day(ts), bucket(8, user_id), with the same field ids as hotgate's definition.
    spec = table.spec()
    assert [type(f.transform) for f in spec.fields] == [DayTransform, BucketTransform]
    assert spec.fields[1].transform.num_buckets == 8
    names = {f.name: f.field_id for f in table.schema().fields}
    assert names == {"id": 1, "user_id": 2, "email": 3, "ts": 4}
    # No column statistics for the pii column.
    assert table.properties["write.metadata.metrics.column.email"] == "none"
    for task in table.scan().plan_files():
        assert 3 not in (task.file.lower_bounds or {}), task.file.lower_bounds
        assert 3 not in (task.file.upper_bounds or {}), task.file.upper_bounds
        assert 2 in task.file.lower_bounds  # user_id keeps its bounds

    # pyiceberg's bucket transform agrees with the hot tier's routing for every user.
    bucket = BucketTransform(8).transform(StringType())
    for user, hot in hot_bucket.items():
        assert bucket(user) == hot, user

    # Each data file holds one (day, bucket) partition, and its rows agree with it.
    for task in table.scan().plan_files():
        partition = task.file.partition
        rows = pq.read_table(task.file.file_path.removeprefix("file://"))
        assert {bucket(u) for u in rows.column("user_id").to_pylist()} == {partition[1]}


def test_a_dropped_column_does_not_shift_the_field_ids():
    # A catalog numbers a new table's columns 1..n; the dropped column is not among them,
    # so the stored columns after it must carry the ids the catalog gave them.
    spec = hotgate_client.log_table(
        "lake.payments",
        ["id int64!", "card string =drop", "user_id string!", "amount float64", "ts timestamp_us!"],
        "user_id", 2,
    )
    hotgate_client.create_table(spec, TOKEN)
    rows = [(i, f"4111-{i}", f"user-{i % 3}", i * 1.5, START + dt.timedelta(minutes=i)) for i in range(30)]
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "card": pa.array([r[1] for r in rows], pa.string()),
            "user_id": pa.array([r[2] for r in rows], pa.string()),
            "amount": pa.array([r[3] for r in rows], pa.float64()),
            "ts": pa.array([r[4] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    client = flight.FlightClient(FLIGHT)
    hotgate_client.put(client, flight.FlightDescriptor.for_path("lake", "payments"), data, TOKEN)
    status, report = hotgate_client.http("POST", "/v1/tables/lake.payments/tier", TOKEN)
    assert status == 200, report
    assert report["records"] == len(rows)

    table = catalog().load_table("lake.payments")
    assert [f.name for f in table.schema().fields] == ["id", "user_id", "amount", "ts"]
    got = table.scan().to_arrow().sort_by("id")
    assert got.column_names == ["id", "user_id", "amount", "ts"]
    assert got.column("user_id").to_pylist() == [r[2] for r in rows]
    assert got.column("amount").to_pylist() == [r[3] for r in rows]
    assert [t.astimezone(dt.timezone.utc) for t in got.column("ts").to_pylist()] == [r[4] for r in rows]


catalog = hotgate_client.iceberg_catalog


def test_pyiceberg_reads_compaction_and_an_added_column():
    """Runs after the test above: a second cycle adds small files to the same partitions,
    compaction (an overwrite commit hotgate builds itself) folds them, and a column added
    afterwards reads as null for every row tiered before it."""
    table = catalog().load_table("lake.clicks")
    before = table.scan().to_arrow().sort_by("id")
    client = flight.FlightClient(FLIGHT)
    more = [
        (1000 + i, f"user-{i % 12}", None, START + dt.timedelta(minutes=17 * i + 1))
        for i in range(240)
    ]
    put(client, more)
    status, report = hotgate_client.http("POST", "/v1/tables/lake.clicks/tier", TOKEN)
    assert status == 200, report
    files_before = len(list(catalog().load_table("lake.clicks").scan().plan_files()))

    status, report = hotgate_client.http(
        "POST",
        "/v1/tables/lake.clicks/maintenance",
        TOKEN,
        {"snapshot_retention": "0s", "purge_min_age": "0s"},
    )
    assert status == 200, report
    assert report["compaction"]["files_removed"] >= 2, report
    table = catalog().load_table("lake.clicks")
    assert table.current_snapshot().summary.operation.value == "replace"
    assert len(list(table.scan().plan_files())) < files_before
    got = table.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == before.column("id").to_pylist() + [r[0] for r in more]

    # An added column: pyiceberg sees it in the schema, null for the tiered rows.
    status, body = hotgate_client.http(
        "POST", "/v1/tables/lake.clicks/columns", TOKEN, {"columns": [{"name": "referrer", "type": "string"}]}
    )
    assert status == 200, body
    table = catalog().load_table("lake.clicks")
    assert {f.name: f.field_id for f in table.schema().fields}["referrer"] == 5
    got = table.scan().to_arrow()
    assert got.column("referrer").null_count == got.num_rows


def test_pyiceberg_reads_a_tiered_primary_key_table():
    """A primary-key table tiers as bucket dumps: pyiceberg sees the current state, one
    row per key, with no delete files."""
    accounts = hotgate_client.table(
        "lake", "accounts", ["id int64!", "balance int64"], primary_key=["id"], bucket_key="id", buckets=4
    )
    hotgate_client.create_table(accounts, TOKEN)
    client = flight.FlightClient(FLIGHT)

    def change(ids, balances=None, op=None):
        columns = {"id": pa.array(ids, pa.int64())}
        if balances is not None:
            columns["balance"] = pa.array(balances, pa.int64())
        data = pa.table(columns)
        command = {"table": "lake.accounts"}
        if op:
            command["op"] = op
        hotgate_client.put_command(client, command, data, TOKEN)

    change(list(range(100)), [i * 10 for i in range(100)])
    assert hotgate_client.http("POST", "/v1/tables/lake.accounts/tier", TOKEN)[0] == 200
    change(list(range(10)), [-1] * 10)
    change(list(range(90, 100)), op="delete")
    status, report = hotgate_client.http("POST", "/v1/tables/lake.accounts/tier", TOKEN)
    assert status == 200, report

    table = catalog().load_table("lake.accounts")
    assert [type(f.transform) for f in table.spec().fields] == [BucketTransform]
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert all(not task.delete_files for task in table.scan().plan_files())
    got = table.scan().to_arrow().sort_by("id")
    want = {i: (-1 if i < 10 else i * 10) for i in range(90)}
    assert dict(zip(got.column("id").to_pylist(), got.column("balance").to_pylist())) == want
    assert got.num_rows == 90

    # A column added to the primary-key table: old rows null, the key still the
    # identifier field, in both tiers.
    status, body = hotgate_client.http(
        "POST", "/v1/tables/lake.accounts/columns", TOKEN, {"columns": [{"name": "note", "type": "string"}]}
    )
    assert status == 200, body
    data = pa.table({"id": pa.array([0], pa.int64()), "note": pa.array(["vip"], pa.string())})
    hotgate_client.put_command(client, {"table": "lake.accounts"}, data, TOKEN)
    status, report = hotgate_client.http("POST", "/v1/tables/lake.accounts/tier", TOKEN)
    assert status == 200, report
    table = catalog().load_table("lake.accounts")
    assert [table.schema().find_field(i).name for i in table.schema().identifier_field_ids] == ["id"]
    got = table.scan().to_arrow().sort_by("id")
    notes = dict(zip(got.column("id").to_pylist(), got.column("note").to_pylist()))
    assert notes[0] == "vip" and all(v is None for k, v in notes.items() if k != 0), notes
    # The upsert without balance replaced the row (upserts are whole rows).
    assert got.num_rows == 90
