"""A TCP proxy in front of a Kafka broker whose connections a test can cut, for GroupDescriptionFaultTests.

The broker advertises the proxy's address, so every client connection goes through it. SIGUSR1 cuts: every
connection is reset and the port stops listening (new connections are refused), as when a broker dies; SIGUSR2
listens again. The broker itself keeps running, with its topics and groups. Stopping the proxy (SIGSTOP) makes the
broker look hung. Usage: cuttable_proxy.py LISTEN_PORT UPSTREAM_PORT. Prints "listening" once it accepts connections.
"""
import asyncio
import signal
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main():
    listen_port, upstream_port = int(sys.argv[1]), int(sys.argv[2])
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
            server = await asyncio.start_server(serve, "127.0.0.1", listen_port, reuse_address=True)

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
