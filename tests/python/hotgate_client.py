"""Shared helpers of the Python client tests: where the server is, call options with a
bearer token, and JSON over HTTP. The Rust test `pyarrow_client` sets the environment."""

import json
import os
import urllib.error
import urllib.request

import pyarrow.flight as flight

FLIGHT = os.environ["HOTGATE_FLIGHT"]
HTTP = os.environ["HOTGATE_HTTP"]


def iceberg_catalog():
    """The catalog hotgate tiers into, opened with pyiceberg: the REST catalog named by
    HOTGATE_REST_URI (with HOTGATE_REST_WAREHOUSE and HOTGATE_REST_TOKEN) when set,
    otherwise hotgate's embedded SQLite catalog in HOTGATE_DATA_DIR."""
    if "HOTGATE_REST_URI" in os.environ:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(
            "hotgate",
            uri=os.environ["HOTGATE_REST_URI"],
            warehouse=os.environ["HOTGATE_REST_WAREHOUSE"],
            token=os.environ["HOTGATE_REST_TOKEN"],
        )
    from pyiceberg.catalog.sql import SqlCatalog

    data_dir = os.environ["HOTGATE_DATA_DIR"]
    return SqlCatalog("hotgate", uri=f"sqlite:///{data_dir}/catalog.db", warehouse=f"file://{data_dir}/warehouse")


def warehouse_dirs():
    """The local directories that hold hotgate's files: the data dir, and the REST
    catalog's warehouse when it is elsewhere."""
    import pathlib

    dirs = [pathlib.Path(os.environ["HOTGATE_DATA_DIR"])]
    if "HOTGATE_REST_WAREHOUSE" in os.environ:
        dirs.append(pathlib.Path(os.environ["HOTGATE_REST_WAREHOUSE"].removeprefix("file://")))
    return dirs


def options(token):
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])


def http(method, path, token, body=None):
    request = urllib.request.Request(
        HTTP + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def table(namespace, name, columns, **settings):
    """A table spec for `POST /v1/tables`. Each column is "name type", with a trailing
    "!" when it is required, "#tag" for each tag and "=rule" for a write rule:
    "id int64!", "email string #pii", "card string =drop"."""
    specs = []
    for column in columns:
        words = column.split()
        spec = {"name": words[0], "type": words[1].rstrip("!")}
        if words[1].endswith("!"):
            spec["nullable"] = False
        tags = [w[1:] for w in words[2:] if w.startswith("#")]
        if tags:
            spec["tags"] = tags
        rules = [w[1:] for w in words[2:] if w.startswith("=")]
        if rules:
            spec["write"] = rules[0]
        specs.append(spec)
    return {"namespace": namespace, "name": name, "columns": specs, **settings}


def log_table(qualified, columns, bucket_key, buckets, **settings):
    """A log table's spec: `qualified` is "namespace.name", the time column is `ts`."""
    namespace, name = qualified.split(".")
    return table(
        namespace, name, columns, time_column="ts", bucket_key=bucket_key, buckets=buckets,
        **settings,
    )


def create_table(spec, token):
    status, body = http("POST", "/v1/tables", token, spec)
    assert status == 201, body


def put(client, descriptor, data, token):
    """DoPut of the pyarrow table `data`; returns each PutResult's JSON."""
    writer, reader = client.do_put(descriptor, data.schema, options(token))
    writer.write_table(data)
    writer.done_writing()
    results = []
    while (chunk := reader.read()) is not None:
        if chunk.size:
            results.append(json.loads(chunk.to_pybytes()))
    writer.close()
    return results


def put_command(client, command, data, token):
    """DoPut with a JSON command descriptor (`{"table": ..., "op": ...}`)."""
    return put(client, flight.FlightDescriptor.for_command(json.dumps(command)), data, token)


def get(client, token, ticket):
    """DoGet of a JSON ticket, read whole."""
    return client.do_get(flight.Ticket(json.dumps(ticket).encode()), options(token)).read_all()
