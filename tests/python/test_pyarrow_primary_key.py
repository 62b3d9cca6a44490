"""Primary-key tables with pyarrow.flight: upsert and delete through DoPut commands, a
batched lookup with its missing keys, and the changelog with before images."""

import datetime as dt
import json
import os

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import hotgate_client
from hotgate_client import FLIGHT

TOKEN = os.environ["HOTGATE_TOKEN"]

PROFILES = hotgate_client.table(
    "crm",
    "profiles",
    ["user_id string!", "plan string", "seats int32", "ts timestamp_us!"],
    primary_key=["user_id"],
    time_column="ts",
    bucket_key="user_id",
    buckets=4,
    hot_retention="1h",
)

START = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)


def options():
    return hotgate_client.options(TOKEN)


@pytest.fixture(scope="module")
def client():
    hotgate_client.create_table(PROFILES, TOKEN)
    return flight.FlightClient(FLIGHT)


def put(client, table, op=None):
    command = {"table": "crm.profiles"}
    if op is not None:
        command["op"] = op
    return hotgate_client.put_command(client, command, table, TOKEN)


def profiles(rows):
    return pa.table(
        {
            "user_id": pa.array([r[0] for r in rows], pa.string()),
            "plan": pa.array([r[1] for r in rows], pa.string()),
            "seats": pa.array([r[2] for r in rows], pa.int32()),
            "ts": pa.array([START] * len(rows), pa.timestamp("us", tz="UTC")),
        }
    )


def get(client, ticket):
    return client.do_get(flight.Ticket(json.dumps(ticket).encode()), options())


def test_upsert_delete_lookup_and_changelog(client):
    [r] = put(client, profiles([("u1", "free", 1), ("u2", "team", 5)]))
    assert (r["rows"], r["changes"], r["missing"]) == (2, 2, 0)
    [r] = put(client, profiles([("u1", "pro", 2)]), op="upsert")
    assert r["changes"] == 2
    keys = pa.table({"user_id": pa.array(["u2", "nobody"], pa.string())})
    [r] = put(client, keys, op="delete")
    assert (r["changes"], r["missing"], r["missing_rows"]) == (1, 1, [1])

    # A lookup: rows in request order, missing keys named in the batch's app_metadata.
    reader = get(client, {"table": "crm.profiles", "lookup": [{"user_id": "u2"}, {"user_id": "u1"}], "columns": ["user_id", "plan"]})
    rows, trailer = [], None
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is not None:
            rows.extend(chunk.data.to_pylist())
        if chunk.app_metadata is not None:
            trailer = json.loads(chunk.app_metadata.to_pybytes())
    assert rows == [{"user_id": "u1", "plan": "pro"}]
    assert trailer == {"requested": 2, "found": 1, "missing": [0]}

    # The changelog: exact kinds, before and after images, offsets per bucket.
    log = get(client, {"table": "crm.profiles", "changelog": {"from": "earliest"}}).read_all()
    assert log.column_names[-4:] == ["_change", "_bucket", "_offset", "_commit_ts"]
    by_user = {}
    for row in log.to_pylist():
        by_user.setdefault(row["user_id"], []).append(row)
    u1 = by_user["u1"]
    assert [(r["_change"], r["plan"], r["seats"]) for r in u1] == [("+I", "free", 1), ("-U", "free", 1), ("+U", "pro", 2)]
    assert [r["_offset"] for r in u1] == [u1[0]["_offset"], u1[0]["_offset"] + 1, u1[0]["_offset"] + 2]
    assert all(r["_commit_ts"] is not None for r in u1)
    assert [(r["_change"], r["plan"]) for r in by_user["u2"]] == [("+I", "team"), ("-D", "team")]

    # A scan is the current state.
    state = get(client, {"table": "crm.profiles"}).read_all()
    assert state.select(["user_id", "plan", "seats"]).to_pylist() == [{"user_id": "u1", "plan": "pro", "seats": 2}]


def test_bad_changes_reach_pyarrow_as_invalid(client):
    keys = pa.table({"plan": pa.array(["free"], pa.string())})
    with pytest.raises(pa.ArrowInvalid, match="missing key column"):
        put(client, keys, op="delete")
    with pytest.raises(pa.ArrowInvalid, match="key column types"):
        get(client, {"table": "crm.profiles", "lookup": [{"user_id": 7}]}).read_all()
