"""S3 storage for a Tansu broker whose topics the tests grow (Tansu answers CreatePartitions "unsupported").

  tansu_s3.py serve BUCKET                            an S3 server (moto) on 127.0.0.1 with BUCKET; prints "tansu_s3 ready PORT"
  tansu_s3.py grow ENDPOINT BUCKET CLUSTER N TOPIC…   raises each TOPIC to N partitions in the broker's metadata

Tansu keeps a cluster's topics in clusters/CLUSTER/meta.json of its bucket and reads it again (a few seconds'
cache) for every metadata answer, so raising `num_partitions` there is what CreatePartitions would do: clients
see the new count and produce to and fetch from the new partitions. The write is conditional on the ETag read,
so a concurrent change by the broker is never overwritten (it is retried instead).
"""
import json
import os
import sys
import time

CREDENTIALS = dict(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")


def serve(bucket):
    import boto3
    from moto.server import ThreadedMotoServer

    # Port 0: the kernel's choice, since a port chosen beforehand can be taken by then, and moto's start() then
    # waits forever for a server whose thread died on "Address in use".
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", **CREDENTIALS).create_bucket(Bucket=bucket)
    print(f"tansu_s3 ready {port}", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # ends with the test process, even if it dies without stopping us
        time.sleep(1)


def grow(endpoint, bucket, cluster, count, topics):
    import boto3
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)
    key = f"clusters/{cluster}/meta.json"
    for _ in range(20):
        current = s3.get_object(Bucket=bucket, Key=key)
        meta = json.loads(current["Body"].read())
        for topic in topics:
            entry = meta["topics"][topic]["topic"]
            if int(count) < entry["num_partitions"]:
                sys.exit(f"{topic} has {entry['num_partitions']} partitions already")
            entry["num_partitions"] = int(count)
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(meta).encode(), ContentType="application/json",
                          IfMatch=current["ETag"])
            print(f"grown {len(topics)} topic(s) to {count} partitions", flush=True)
            return
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "PreconditionFailed":
                raise
    sys.exit("meta.json kept changing under the edit")


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "serve":
        serve(*arguments)
    elif command == "grow":
        grow(arguments[0], arguments[1], arguments[2], arguments[3], arguments[4:])
    else:
        sys.exit(__doc__)
