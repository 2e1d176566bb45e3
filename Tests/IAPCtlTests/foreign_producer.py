"""A producer written by another team from schemas/README.md ("The producer contract") alone,
with the Kafka client that team already uses (confluent-kafka).

usage: foreign_producer.py submitted BROKERS PREFIX USER_ID JWS_FILE
       foreign_producer.py consumed  BROKERS PREFIX USER_ID STORE TRANSACTION_ID
Exit 0 once the broker acknowledged the event, 1 otherwise.
"""
import datetime
import json
import sys
import uuid

from confluent_kafka import Producer


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def publish(brokers, topic, event_type, event_id, key, body):
    producer = Producer({"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": True})
    failures = []
    headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", event_id.encode()),
        ("ce_type", ("iap.%s.v1" % event_type).encode()),
        ("ce_source", b"/python-shop-backend"),
        ("ce_time", now().encode()),
        ("ce_dataschema", ("urn:iap-pipeline:schema:%s:v1" % event_type).encode()),
        ("content-type", b"application/json"),
    ]
    producer.produce(topic, key=key.encode(), value=json.dumps(body).encode(), headers=headers,
                     on_delivery=lambda error, message: failures.append(error) if error else None)
    if producer.flush(30) != 0 or failures:
        print("not acknowledged: %s" % failures, file=sys.stderr)
        return 1
    print("published %s to %s" % (event_id, topic))
    return 0


def main(argv):
    mode, brokers, prefix, user_id = argv[1:5]
    if mode == "submitted":
        with open(argv[5]) as jws:
            submission_id = str(uuid.uuid4())
            body = {"store": "appstore", "kind": "signedTransaction", "signedTransaction": jws.read().strip(),
                    "userId": user_id, "submittedAt": now(), "source": "server", "submissionId": submission_id}
        return publish(brokers, prefix + "iap.purchase.submitted", "purchase.submitted", "submitted:" + submission_id, user_id, body)
    if mode == "consumed":
        store, transaction_id = argv[5:7]
        body = {"store": store, "transactionId": transaction_id, "userId": user_id, "consumedAt": now()}
        return publish(brokers, prefix + "iap.purchase.consumed", "purchase.consumed", "consumed:%s:%s" % (store, transaction_id), user_id, body)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
