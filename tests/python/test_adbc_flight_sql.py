"""Flight SQL through the ADBC Flight SQL driver (DB-API), on the same port as the JSON
tickets. The Rust test `pyarrow_client` sets HOTGATE_ADMIN_TOKEN (root),
HOTGATE_SQL_ANALYST_TOKEN (a principal whose catalog role `sql_reader` may list and
read namespace `sq`, and nothing else) and HOTGATE_AUDITOR_TOKEN.

The analyst's view of `sq.orders`: only `eu` rows (a row filter), `email` hashed (a
mask), `card` denied. `sqx.hidden` is not granted to the analyst at all.
"""

import datetime as dt
import os
import time

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from adbc_driver_flightsql import DatabaseOptions

import hotgate_client
from hotgate_client import FLIGHT, create_table, log_table, put

ADMIN = os.environ["HOTGATE_ADMIN_TOKEN"]
ANALYST = os.environ["HOTGATE_SQL_ANALYST_TOKEN"]
AUDITOR = os.environ["HOTGATE_AUDITOR_TOKEN"]
START = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.timezone.utc)
DELETED_ID = 8


def connect(token):
    return flight_sql.connect(
        FLIGHT, db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"}
    )


def query(token, sql, parameters=None):
    with connect(token) as conn, conn.cursor() as cur:
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table()


def refused(token, sql):
    """The error text of a statement that must fail, and that it returned nothing."""
    with connect(token) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as e:
            cur.execute(sql)
            cur.fetch_arrow_table()
        return str(e.value)


def stamps(n):
    return pa.array([START + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC"))


@pytest.fixture(scope="module", autouse=True)
def tables():
    create_table(
        log_table(
            "sq.orders",
            ["id int64!", "region string!", "email string #subject", "card string", "amount int64!", "ts timestamp_us!"],
            "id",
            2,
        ),
        ADMIN,
    )
    create_table(log_table("sq.customers", ["id int64!", "name string!", "ts timestamp_us!"], "id", 2), ADMIN)
    create_table(log_table("sqx.hidden", ["id int64!", "ts timestamp_us!"], "id", 1), ADMIN)
    for policy in [
        {"id": "sq_eu", "scope": {"table": "sq.orders"}, "to": ["sql_reader"], "kind": "row_filter", "expr": "region = 'eu'"},
        {"id": "sq_hash_email", "scope": {"table": "sq.orders"}, "to": ["sql_reader"], "kind": "column_mask", "column": "email", "mask": "hash"},
        {"id": "sq_no_card", "scope": {"table": "sq.orders"}, "to": ["sql_reader"], "kind": "column_deny", "column": "card"},
    ]:
        status, body = hotgate_client.http("POST", "/v1/policies", ADMIN, policy)
        assert status == 201, body
    client = flight.FlightClient(FLIGHT)
    ids = list(range(10))
    orders = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array(["eu" if i % 2 == 0 else "us" for i in ids]),
            "email": pa.array([f"u{i % 3}@shop.example" for i in ids]),
            "card": pa.array([f"4111-{i:04}" for i in ids]),
            "amount": pa.array([i * 10 for i in ids], pa.int64()),
            "ts": stamps(10),
        }
    )
    put(client, flight.FlightDescriptor.for_path("sq", "orders"), orders, ADMIN)
    customers = pa.table(
        {"id": pa.array(ids, pa.int64()), "name": pa.array([f"c{i}" for i in ids]), "ts": stamps(10)}
    )
    put(client, flight.FlightDescriptor.for_path("sq", "customers"), customers, ADMIN)
    hidden = pa.table({"id": pa.array([0, 1], pa.int64()), "ts": stamps(2)})
    put(client, flight.FlightDescriptor.for_path("sqx", "hidden"), hidden, ADMIN)


def test_scan_aggregate_and_join_with_a_bearer_header():
    scan = query(ADMIN, "SELECT id, region FROM sq.orders ORDER BY id")
    assert scan["id"].to_pylist()[:10] == list(range(10))
    totals = query(
        ADMIN,
        "SELECT region, count(*) AS n, sum(amount) AS total FROM sq.orders "
        "WHERE id < 10 GROUP BY region ORDER BY region",
    )
    assert totals.to_pylist() == [
        {"region": "eu", "n": 5, "total": 200},
        {"region": "us", "n": 5, "total": 250},
    ]
    joined = query(
        ADMIN,
        "SELECT o.id, c.name FROM sq.orders o JOIN sq.customers c ON o.id = c.id "
        "WHERE o.amount >= 50 AND o.id < 10 ORDER BY o.id",
    )
    assert joined.to_pylist() == [{"id": i, "name": f"c{i}"} for i in range(5, 10)]
    windowed = query(
        ADMIN,
        "WITH ranked AS (SELECT id, region, row_number() OVER (PARTITION BY region ORDER BY id DESC) AS r "
        "FROM sq.orders WHERE id < 10) SELECT id FROM ranked WHERE r = 1 ORDER BY id",
    )
    assert windowed["id"].to_pylist() == [8, 9]


def test_user_and_password_connect_through_the_handshake():
    with flight_sql.connect(FLIGHT, db_kwargs={"username": "anyone", "password": ADMIN}) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) AS n FROM sq.customers WHERE id < 10")
            assert cur.fetch_arrow_table()["n"].to_pylist() == [10]
    with pytest.raises(adbc_driver_manager.Error) as e:
        with flight_sql.connect(FLIGHT, db_kwargs={"username": "anyone", "password": "not-a-jwt"}) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetch_arrow_table()
    assert "UNAUTHENTICATED" in str(e.value).upper()


def test_catalog_metadata_lists_only_what_the_caller_may_list():
    with connect(ANALYST) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["hotgate"]
        schemas = {s["db_schema_name"]: s for s in objects[0]["catalog_db_schemas"]}
        assert set(schemas) == {"sq"}, schemas.keys()
        tables = {t["table_name"]: t for t in schemas["sq"]["db_schema_tables"]}
        assert set(tables) == {"customers", "orders"}
        columns = [c["column_name"] for c in tables["orders"]["table_columns"]]
        assert columns == ["id", "region", "email", "amount", "ts"]
        schema = conn.adbc_get_table_schema("orders", db_schema_filter="sq")
        assert schema.names == ["id", "region", "email", "amount", "ts"]
        assert conn.adbc_get_table_types() == ["TABLE"]
    with connect(ADMIN) as conn:
        schema = conn.adbc_get_table_schema("orders", db_schema_filter="sq")
        assert "card" in schema.names
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "hotgate"


def test_a_prepared_statement_runs_twice_with_bound_parameters():
    with connect(ADMIN) as conn, conn.cursor() as cur:
        sql = "SELECT id, amount FROM sq.orders WHERE id = $1"
        cur.execute(sql, (3,))
        assert cur.fetch_arrow_table().to_pylist() == [{"id": 3, "amount": 30}]
        cur.execute(sql, (4,))
        assert cur.fetch_arrow_table().to_pylist() == [{"id": 4, "amount": 40}]


def test_ingest_appends_to_an_existing_table_and_reads_back():
    rows = pa.table(
        {"id": pa.array([100, 101], pa.int64()), "name": pa.array(["new0", "new1"]), "ts": stamps(2)}
    )
    with connect(ADMIN) as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("customers", rows, mode="append", db_schema_name="sq") == 2
        conn.commit()
    back = query(ADMIN, "SELECT id, name FROM sq.customers WHERE id >= 100 ORDER BY id")
    assert back.to_pylist() == [{"id": 100, "name": "new0"}, {"id": 101, "name": "new1"}]
    with connect(ADMIN) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as e:
            cur.adbc_ingest("brand_new", rows, mode="create", db_schema_name="sq")
        assert "existing table" in str(e.value)
    with connect(ANALYST) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as e:
            cur.adbc_ingest("customers", rows, mode="append", db_schema_name="sq")
        assert "TABLE_WRITE_DATA" in str(e.value)
    assert query(ADMIN, "SELECT count(*) AS n FROM sq.customers")["n"].to_pylist() == [12]


def test_sql_sees_exactly_the_analysts_view():
    # count(*) counts visible rows only.
    assert query(ANALYST, "SELECT count(*) AS n FROM sq.orders WHERE id < 10")["n"].to_pylist() == [5]
    # GROUP BY a masked column groups the masked values.
    groups = query(ANALYST, "SELECT email, count(*) AS n FROM sq.orders WHERE id < 10 GROUP BY email")
    assert sum(groups["n"].to_pylist()) == 5
    assert all(len(e) == 64 and "@" not in e for e in groups["email"].to_pylist())
    # A filter on the raw value of a masked column matches nothing.
    assert query(ANALYST, "SELECT id FROM sq.orders WHERE email = 'u0@shop.example'").num_rows == 0
    # An expression that fails only on a hidden row (id 1 is a `us` row) does not fail.
    ok = query(ANALYST, "SELECT sum(10 / (id - 1)) AS s FROM sq.orders WHERE id < 10")
    assert ok.num_rows == 1
    assert "zero" in refused(ADMIN, "SELECT sum(10 / (id - 1)) AS s FROM sq.orders").lower()
    # The deny holds through *, * in a subquery, and a CTE; naming it is refused.
    for sql in [
        "SELECT * FROM sq.orders",
        "SELECT * FROM (SELECT * FROM sq.orders) t",
        "WITH o AS (SELECT * FROM sq.orders) SELECT * FROM o",
    ]:
        assert "card" not in query(ANALYST, sql).schema.names, sql
    assert "card" in refused(ANALYST, "SELECT card FROM sq.orders")
    assert "card" in query(ADMIN, "SELECT * FROM sq.orders").schema.names


def test_tables_without_a_grant_fail_without_data():
    joined = refused(ANALYST, "SELECT o.id FROM sq.orders o JOIN sqx.hidden h ON o.id = h.id")
    assert "TABLE_READ_DATA" in joined and "sqx.hidden" in joined
    audit = refused(ANALYST, "SELECT id FROM sq.orders WHERE id IN (SELECT seq FROM _system.audit)")
    assert "_system.audit" in audit
    # A table that does not exist looks the same as one without a grant.
    missing = refused(ANALYST, "SELECT * FROM sqx.nothing_here")
    assert missing.replace("nothing_here", "hidden").split("Detail")[0].strip() == refused(
        ANALYST, "SELECT * FROM sqx.hidden"
    ).split("Detail")[0].strip()
    # The auditor may read the audit table.
    assert query(AUDITOR, "SELECT count(*) AS n FROM _system.audit")["n"].to_pylist()[0] > 0


def test_bad_statements_get_clear_errors_and_write_nothing():
    parse = refused(ADMIN, "SELEC id FROM sq.orders")
    assert "INVALID_ARGUMENT" in parse.upper() and "Line: 1" in parse
    for sql in [
        "INSERT INTO sq.orders (id) VALUES (1)",
        "DELETE FROM sq.orders",
        "CREATE TABLE t AS SELECT 1",
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
        "COPY (SELECT 1) TO '/tmp/out.csv'",
        "DROP TABLE sq.orders",
        "SET datafusion.execution.batch_size = 1",
        "EXPLAIN SELECT * FROM sq.orders",
        "SELECT 1 INTO newtable",
    ]:
        assert "read-only" in refused(ADMIN, sql), sql
    assert "not found" in refused(ADMIN, "SELECT * FROM read_csv('/etc/passwd')").lower()
    deep = "SELECT " + "(" * 300 + "1" + ")" * 300
    assert "levels deep" in refused(ADMIN, deep)
    chain = "SELECT 1 FROM sq.orders WHERE " + " OR ".join(f"id = {i}" for i in range(400))
    assert "levels deep" in refused(ADMIN, chain)
    assert "bytes long" in refused(ADMIN, "SELECT '" + "x" * 70000 + "'")
    assert "longer than" in refused(ADMIN, "SELECT length(repeat('x', 2000000000)) AS n")
    assert query(ADMIN, "SELECT count(*) AS n FROM sq.orders")["n"].to_pylist() == [10]


def test_an_accepted_deletion_hides_the_subject_from_every_shape():
    status, body = hotgate_client.http(
        "POST",
        "/v1/deletions",
        ADMIN,
        {"tables": ["sq.orders"], "predicate": f"id = {DELETED_ID}", "subject": "sql-case-1", "reason": "test"},
    )
    assert status == 202, body
    for sql in [
        f"SELECT * FROM sq.orders WHERE id = {DELETED_ID}",
        f"SELECT count(*) AS n FROM sq.orders WHERE id = {DELETED_ID} HAVING count(*) > 0",
        f"SELECT o.id FROM sq.orders o JOIN sq.customers c ON o.id = c.id WHERE o.id = {DELETED_ID}",
        f"SELECT id FROM sq.customers WHERE id IN (SELECT id FROM sq.orders WHERE id = {DELETED_ID})",
        f"WITH o AS (SELECT * FROM sq.orders) SELECT * FROM o WHERE id = {DELETED_ID}",
    ]:
        assert query(ADMIN, sql).num_rows == 0, sql
    assert query(ADMIN, "SELECT count(*) AS n FROM sq.orders")["n"].to_pylist() == [9]


def test_each_statement_is_audited_with_every_table_and_a_digest_only():
    marker = "SELECT o.id, c.name FROM sq.orders o JOIN sq.customers c ON o.id = c.id WHERE o.id = 2"
    query(ANALYST, marker)
    deadline = time.monotonic() + 10
    while True:
        status, body = hotgate_client.http("GET", "/v1/audit?action=sql&table=sq.customers&limit=1000", AUDITOR)
        assert status == 200, body
        records = [
            r
            for r in body["records"]
            if r["table"] == "sq.customers,sq.orders"
            and r["decision"] == "allow"
            and r["principal"] == "sql_analyst"
        ]
        if records or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert records, body
    record = records[-1]
    assert record["columns_returned"] == ["id", "name"]
    assert any(p.startswith("sq.orders:sq_eu@") for p in record["policies"]), record
    assert record["query_digest"] and "SELECT" not in str(record)
    # A refused statement's record names the tables it named, the ungranted one too.
    refused(ANALYST, "SELECT o.id FROM sq.orders o JOIN sqx.hidden h ON o.id = h.id WHERE o.id = 77")
    deadline = time.monotonic() + 10
    while True:
        status, body = hotgate_client.http("GET", "/v1/audit?table=sqx.hidden&decision=deny&limit=1000", AUDITOR)
        assert status == 200, body
        denied = [r for r in body["records"] if r["principal"] == "sql_analyst" and r["action"].startswith("sql")]
        if denied or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert denied, body
    assert "sqx.hidden" in denied[-1]["table"].split(","), denied[-1]
    assert "TABLE_READ_DATA" in denied[-1]["reason"]
