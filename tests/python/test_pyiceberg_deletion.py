"""A compliance deletion end to end, checked from outside hotgate: a log table and a
primary-key table with the subject's rows in both tiers and in several snapshots, one of
them pinned by a tag pyiceberg created. After `verified`:

- hotgate's reads (scan, lookup, changelog) find nothing of the subject;
- pyiceberg's scan of the current snapshot finds nothing, and it cannot time-travel to
  any snapshot that held the rows (they and the tag are gone);
- no file under the data dir (hot segments, RocksDB, the deletion record) or the
  warehouse holds the subject's literal, in raw bytes or in decoded Parquet strings;
- every other subject's rows are still there."""

import datetime as dt
import json
import os
import pathlib
import time

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import hotgate_client
from hotgate_client import FLIGHT

TOKEN = os.environ["HOTGATE_TOKEN"]
ADMIN = os.environ["HOTGATE_ADMIN_TOKEN"]
DATA_DIR = pathlib.Path(os.environ["HOTGATE_DATA_DIR"])

# Literals no other test writes, so a search of the whole data dir is about this test.
SUBJECT = "subj-7f3a9c"
OTHERS = [f"subj-other-{i:02}" for i in range(15)]
USERS = [SUBJECT] + OTHERS

VISITS = hotgate_client.log_table(
    "erase.visits", ["id int64!", "user_id string!", "page string", "ts timestamp_us!"],
    "user_id", 4,
)

PROFILES = hotgate_client.table(
    "erase",
    "profiles",
    ["user_id string!", "plan string", "ts timestamp_us!"],
    primary_key=["user_id"],
    time_column="ts",
    bucket_key="user_id",
    buckets=4,
)

START = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc)


catalog = hotgate_client.iceberg_catalog


def do_put(client, command, table):
    hotgate_client.put_command(client, command, table, TOKEN)


def visits(first, count):
    ids = list(range(first, first + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "user_id": pa.array([USERS[i % len(USERS)] for i in ids], pa.string()),
            "page": pa.array([f"/page/{USERS[i % len(USERS)]}/{i}" for i in ids], pa.string()),
            "ts": pa.array([START + dt.timedelta(minutes=7 * i) for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def profiles(plan):
    return pa.table(
        {
            "user_id": pa.array(USERS, pa.string()),
            "plan": pa.array([f"{plan}-{u}" for u in USERS], pa.string()),
            "ts": pa.array([START] * len(USERS), pa.timestamp("us", tz="UTC")),
        }
    )


def tier(table):
    status, report = hotgate_client.http("POST", f"/v1/tables/{table}/tier", TOKEN)
    assert status == 200, report
    return report


def read(client, ticket):
    reader = client.do_get(flight.Ticket(json.dumps(ticket).encode()), hotgate_client.options(TOKEN))
    return reader.read_all()


def files_holding(literal):
    """Files under the data dir (the warehouse included) whose raw bytes, or whose
    decoded Parquet string values, contain `literal`."""
    needle = literal.encode()
    found = []
    for path in (p for d in hotgate_client.warehouse_dirs() for p in d.rglob("*")):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        if needle in data:
            found.append(str(path))
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            for column in table.columns:
                if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                    if any(v is not None and literal in v for v in column.to_pylist()):
                        found.append(str(path))
                        break
    return found


def wait_verified(request_id):
    deadline = time.monotonic() + 120
    while True:
        status, shown = hotgate_client.http("GET", f"/v1/deletions/{request_id}", ADMIN)
        assert status == 200, shown
        if shown["state"] == "verified":
            return shown
        assert time.monotonic() < deadline, (shown["state"], shown["pending"])
        time.sleep(0.2)


@pytest.fixture(scope="module")
def client():
    for spec in (VISITS, PROFILES):
        hotgate_client.create_table(spec, TOKEN)
    return flight.FlightClient(FLIGHT)


def test_a_verified_deletion_leaves_no_trace_in_either_tier(client):
    # Three cycles on the log table and two on the primary-key table, so the subject's
    # rows sit in several snapshots; the last batch stays hot.
    for first in (0, 160, 320):
        do_put(client, {"table": "erase.visits"}, visits(first, 160))
        tier("erase.visits")
    do_put(client, {"table": "erase.visits"}, visits(480, 160))
    do_put(client, {"table": "erase.profiles"}, profiles("free"))
    tier("erase.profiles")
    do_put(client, {"table": "erase.profiles"}, profiles("pro"))
    tier("erase.profiles")
    do_put(client, {"table": "erase.profiles"}, profiles("team"))

    visits_table = catalog().load_table("erase.visits")
    old_snapshots = {
        "erase.visits": [s.snapshot_id for s in visits_table.snapshots()],
        "erase.profiles": [s.snapshot_id for s in catalog().load_table("erase.profiles").snapshots()],
    }
    assert len(old_snapshots["erase.visits"]) == 3
    # A tag pins the first snapshot, as an auditor might have done.
    first = min(visits_table.snapshots(), key=lambda s: s.sequence_number).snapshot_id
    visits_table.manage_snapshots().create_tag(first, "quarter-end").commit()
    assert catalog().load_table("erase.visits").scan(snapshot_id=first).to_arrow().num_rows == 160

    files_before = len(list(catalog().load_table("erase.visits").scan().plan_files()))

    # The search works: before the deletion it finds the literal (at least in the
    # hot segments and the cold files).
    before = files_holding(SUBJECT)
    assert any("/warehouse/erase/visits/" in f for f in before), before
    assert any("/data/erase/visits/" in f for f in before), before

    status, record = hotgate_client.http(
        "POST",
        "/v1/deletions",
        ADMIN,
        {
            "tables": ["erase.visits", "erase.profiles"],
            "predicate": f"user_id = '{SUBJECT}'",
            "subject": "ticket-991",
            "reason": "GDPR art. 17",
        },
    )
    assert status == 202, record
    shown = wait_verified(record["id"])
    receipt = shown["receipt"]
    assert receipt["hot_rows_deleted"] > 0, receipt
    assert receipt["keys_erased"] == 1, receipt
    assert receipt["cold_rows_deleted"] > 0, receipt
    assert "erase.visits:quarter-end" in receipt["refs_removed"], receipt
    assert receipt["snapshots_expired"] >= 3, receipt
    assert receipt["cold_files_deleted"] > 0, receipt
    assert receipt["verify_files_searched"] > 0 and receipt["verify_literals"] >= 1, receipt
    # The bucket key fixes one bucket: the copy-on-write read only that bucket's files.
    assert 0 < receipt["cold_files_read"] < files_before, receipt
    assert [h["state"] for h in shown["history"]] == ["accepted", "hot_applied", "cold_applied", "purged", "verified"]
    assert all(t["predicate"] == "" and len(t["predicate_hmac"]) == 64 for t in shown["targets"]), shown

    # hotgate's reads find nothing of the subject, and everything else.
    got = read(client, {"table": "erase.visits", "columns": ["id", "user_id"]})
    assert SUBJECT not in got.column("user_id").to_pylist()
    assert sorted(got.column("id").to_pylist()) == [i for i in range(640) if i % len(USERS) != 0]
    got = read(client, {"table": "erase.profiles"})
    assert sorted(got.column("user_id").to_pylist()) == sorted(OTHERS)
    assert set(got.column("plan").to_pylist()) == {f"team-{u}" for u in OTHERS}
    lookup = client.do_get(
        flight.Ticket(json.dumps({"table": "erase.profiles", "lookup": [{"user_id": SUBJECT}, {"user_id": OTHERS[0]}]}).encode()),
        hotgate_client.options(TOKEN),
    ).read_all()
    assert lookup.column("user_id").to_pylist() == [OTHERS[0]]
    changes = read(client, {"table": "erase.profiles", "changelog": {"from": "earliest", "follow": False}})
    assert SUBJECT not in changes.column("user_id").to_pylist()
    assert OTHERS[0] in changes.column("user_id").to_pylist()

    # pyiceberg: the current snapshots hold every other row and none of the subject's;
    # the old snapshots and the tag are gone, so time travel to them fails.
    for name in ("erase.visits", "erase.profiles"):
        table = catalog().load_table(name)
        current = table.scan().to_arrow()
        assert SUBJECT not in current.column("user_id").to_pylist(), name
        assert [s.snapshot_id for s in table.snapshots()] == [table.current_snapshot().snapshot_id]
        assert set(table.metadata.refs) == {"main"}
        for old in old_snapshots[name]:
            assert table.snapshot_by_id(old) is None
            with pytest.raises(ValueError):
                table.scan(snapshot_id=old).to_arrow()
    cold_ids = sorted(catalog().load_table("erase.visits").scan().to_arrow().column("id").to_pylist())
    assert cold_ids == [i for i in range(480) if i % len(USERS) != 0]

    # No file under the data dir or the warehouse holds the literal any more.
    assert files_holding(SUBJECT) == []
    assert files_holding(OTHERS[0]) != []
