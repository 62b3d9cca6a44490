"""Kafka with a real client (confluent-kafka) for the source tests, which run it as a
command: create a topic, or produce the records of a JSON-lines file.

    kafka_tool.py create-topic BOOTSTRAP TOPIC PARTITIONS
    kafka_tool.py produce BOOTSTRAP TOPIC FILE

Each line of FILE is {"partition": p, "key": "..." | null, "value": <JSON> | null,
"raw": "<text sent as the value as it is>"}; a null value is a tombstone. With
"avro": <Avro schema JSON>, the value is encoded by fastavro with that writer schema,
as a bare datum, or in the Confluent wire format (magic byte 0, the 4-byte big-endian
"schema_id", the datum) when the line has "schema_id". It prints the number of records
the broker acknowledged, and fails if any was not.
"""

import io
import json
import struct
import sys

import fastavro

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)])
    for future in futures.values():
        future.result(timeout=30)


def produce(bootstrap, topic, path):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "acks": "all",
        "enable.idempotence": False,
    })
    failed = []
    acked = [0]

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked[0] += 1

    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if "raw" in record:
                value = record["raw"].encode()
            elif "avro" in record and record.get("value") is not None:
                out = io.BytesIO()
                if "schema_id" in record:
                    out.write(b"\x00" + struct.pack(">I", record["schema_id"]))
                schema = fastavro.parse_schema(record["avro"])
                fastavro.schemaless_writer(out, schema, record["value"])
                value = out.getvalue()
            elif record.get("value") is None:
                value = None
            else:
                value = json.dumps(record["value"]).encode()
            key = record.get("key")
            while True:
                try:
                    producer.produce(
                        topic,
                        value=value,
                        key=None if key is None else key.encode(),
                        partition=record["partition"],
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    if producer.flush(60) != 0:
        failed.append("records still unsent after 60 s")
    if failed:
        print(f"produce failed: {failed[:3]}", file=sys.stderr)
        sys.exit(1)
    print(acked[0])


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"create-topic": create_topic, "produce": produce}[command](*args)
