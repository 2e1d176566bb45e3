"""TLS in front of a plaintext Kafka broker, for BrokerTLSTests.

The packaged Tansu does not serve TLS itself (it refuses --cert with --key), so the test puts this
proxy in front of a Tansu that advertises the proxy's address: every client connection, bootstrap
and broker alike, is TLS up to here. Usage: tls_proxy.py LISTEN_PORT UPSTREAM_PORT CERT KEY
Prints "listening" once it accepts connections.
"""
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def main():
    listen_port, upstream_port, cert, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def serve(client_reader, client_writer):
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    server = await asyncio.start_server(serve, "127.0.0.1", listen_port, ssl=context)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
