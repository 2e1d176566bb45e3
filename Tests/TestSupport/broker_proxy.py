"""A TCP proxy in front of a plaintext Kafka broker (Tansu) that advertises the proxy's address, so that every
client connection, bootstrap and broker alike, goes through it. For ProxiedBroker.

With CERT and KEY it terminates TLS (the packaged Tansu does not serve TLS itself: it refuses --cert with --key).
SIGUSR1 cuts: every connection is reset and the port stops listening (new connections are refused), as when a
broker dies; SIGUSR2 listens again. The broker itself keeps running, with its topics and groups. Stopping the proxy
(SIGSTOP) makes the broker look hung.
Usage: broker_proxy.py LISTEN_PORT UPSTREAM_PORT [CERT KEY]. Prints "listening" once it accepts connections.
"""
import asyncio
import signal
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
    listen_port, upstream_port = int(sys.argv[1]), int(sys.argv[2])
    context = None
    if len(sys.argv) > 4:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    open_writers = set()
    server = None

    async def serve(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_writer.transport.abort()
            return
        pair = {client_writer, upstream_writer}
        open_writers.update(pair)
        try:
            await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))
        finally:
            open_writers.difference_update(pair)

    async def listen():
        nonlocal server
        if server is None or not server.is_serving():
            server = await asyncio.start_server(serve, "127.0.0.1", listen_port, ssl=context, reuse_address=True)

    def cut():
        if server is not None:
            server.close()
        for writer in list(open_writers):
            writer.transport.abort()
        open_writers.clear()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, cut)
    loop.add_signal_handler(signal.SIGUSR2, lambda: asyncio.ensure_future(listen()))
    await listen()
    print("listening", flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
