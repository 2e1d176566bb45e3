"""A shop backend written by another team from README.md and schemas/README.md alone, with the Kafka client that
team already uses (confluent-kafka): it submits a Google Play purchase the app reported, waits for the pipeline's
answer, then reads what the user owns from the ingest's read side.

usage: googleplay_producer.py BROKERS PREFIX INGEST_URL READ_SECRET_FILE USER_ID PURCHASE_DATA_FILE SIGNATURE_FILE

PURCHASE_DATA_FILE holds Purchase.getOriginalJson() exactly as the app got it, SIGNATURE_FILE Purchase.getSignature().
Prints one JSON line {"granted": the item.granted event, "holdings": the answer of GET /v1/users/{userId}} and exits 0;
exits 1 when the purchase is rejected or no answer comes in time, 2 on a usage error.
"""
import datetime
import hashlib
import hmac
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

ANSWER_TIMEOUT_SECONDS = 150


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def answers_from_now(brokers, topics):
    """A consumer of `topics` positioned at their ends: it reads only what is published after this call."""
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "googleplay-producer-" + str(uuid.uuid4()),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    metadata = consumer.list_topics(timeout=10)
    positions = []
    for topic in topics:
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise RuntimeError("topic %s does not exist" % topic)
        for partition in metadata.topics[topic].partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            positions.append(TopicPartition(topic, partition, high))
    consumer.assign(positions)
    return consumer


def submit(brokers, topic, user_id, body, submission_id):
    """Publishes the purchase.submitted event; True once the broker acknowledged it."""
    producer = Producer({"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": True})
    failures = []
    time_now = now()
    headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", ("submitted:" + submission_id).encode()),
        ("ce_type", b"iap.purchase.submitted.v1"),
        ("ce_source", b"/python-android-backend"),
        ("ce_time", time_now.encode()),
        ("ce_dataschema", b"urn:iap-pipeline:schema:purchase.submitted:v1"),
        ("content-type", b"application/json"),
    ]
    producer.produce(topic, key=user_id.encode(), value=json.dumps(body).encode(), headers=headers,
                     on_delivery=lambda error, message: failures.append(error) if error else None)
    return producer.flush(30) == 0 and not failures


def await_answer(consumer, granted_topic, user_id, transaction_id, submission_id):
    """The item.granted event of this purchase, or raises with the purchase.rejected that answered it instead."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise RuntimeError("reading answers: %s" % message.error())
        if message.value() is None:
            continue
        event = json.loads(message.value())
        if event.get("store") != "googleplay" or event.get("userId") != user_id:
            continue
        if message.topic() == granted_topic:
            if event.get("transactionId") == transaction_id:
                return event
        elif event.get("submissionId") == submission_id or event.get("transactionId") == transaction_id:
            raise RuntimeError("rejected: %s (retryable: %s) %s" % (event.get("reason"), event.get("retryable"), event.get("detail", "")))
    raise RuntimeError("no answer within %d s" % ANSWER_TIMEOUT_SECONDS)


def holdings(ingest_url, secret, user_id):
    """GET /v1/users/{userId}, signed with the backend's read secret."""
    path = "/v1/users/" + urllib.parse.quote(user_id, safe="")
    timestamp = str(int(time.time()))
    canonical = "\n".join(["v1", "GET", path, "", timestamp, hashlib.sha256(b"").hexdigest()])
    signature = hmac.new(secret, canonical.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(ingest_url.rstrip("/") + path, method="GET",
                                     headers={"X-IAP-Timestamp": timestamp, "X-IAP-Signature": "v1=" + signature})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def main(argv):
    if len(argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    brokers, prefix, ingest_url, secret_file, user_id, data_file, signature_file = argv[1:8]
    with open(data_file, encoding="utf-8", newline="") as data:
        purchase_data = data.read()  # exactly as signed: not re-serialised, not stripped
    with open(signature_file, encoding="utf-8") as signature:
        purchase_signature = signature.read().strip()
    with open(secret_file, "rb") as secret:
        read_secret = secret.read().strip()
    purchase = json.loads(purchase_data)
    transaction_id = purchase.get("orderId") or purchase["purchaseToken"]

    submission_id = str(uuid.uuid4())
    body = {"store": "googleplay", "kind": "googlePlayPurchase",
            "googleplay": {"packageName": purchase["packageName"], "productId": purchase["productId"],
                           "purchaseToken": purchase["purchaseToken"], "purchaseData": purchase_data,
                           "signature": purchase_signature},
            "userId": user_id, "submittedAt": now(), "source": "server", "submissionId": submission_id}
    granted_topic, rejected_topic = prefix + "iap.item.granted", prefix + "iap.purchase.rejected"
    consumer = answers_from_now(brokers, [granted_topic, rejected_topic])
    try:
        if not submit(brokers, prefix + "iap.purchase.submitted", user_id, body, submission_id):
            print("the broker did not acknowledge the submission", file=sys.stderr)
            return 1
        print("submitted %s (%s)" % (submission_id, transaction_id), file=sys.stderr)
        granted = await_answer(consumer, granted_topic, user_id, transaction_id, submission_id)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        consumer.close()
    try:
        owned = holdings(ingest_url, read_secret, user_id)
    except urllib.error.HTTPError as error:
        print("GET /v1/users/%s: %d %s" % (user_id, error.code, error.read().decode(errors="replace")), file=sys.stderr)
        return 1
    print(json.dumps({"granted": granted, "holdings": owned}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
