"""A transport whose connections count their socket reads, so a request can tell which of its
stream's events reached the client in one read.

uvicorn sends each SSE event as its own HTTP chunk, and h11 hands httpx one chunk per
iteration of `aiter_bytes()`, so the iterations say nothing of how the bytes arrived: 16 events
that sat in the socket until a late read come out as 16 iterations microseconds apart. The
socket read is what tells. httpcore puts the connection's network stream in each response's
`network_stream` extension; this module's stream counts its reads there (`reads`).
"""

from __future__ import annotations

import ssl
import typing

import httpcore
import httpx


class CountingStream(httpcore.AsyncNetworkStream):
    """A network stream that counts its reads."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self.reads = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._inner.read(max_bytes, timeout)
        self.reads += 1
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return CountingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class CountingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, its streams wrapped in CountingStream."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        return CountingStream(await self._inner.connect_tcp(
            host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        return CountingStream(await self._inner.connect_unix_socket(
            path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def counting_transport(limits: httpx.Limits, ssl_context: ssl.SSLContext
                       ) -> httpx.AsyncHTTPTransport:
    """httpx's transport with `limits`, its pool's connections counting their reads."""
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits)
    transport._pool = httpcore.AsyncConnectionPool(  # what httpx builds, plus the backend
        ssl_context=ssl_context, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, network_backend=CountingBackend())
    return transport


def reads_of(response: httpx.Response) -> typing.Callable[[], int | None]:
    """How many reads the response's connection has made so far (None: not counted)."""
    stream = response.extensions.get("network_stream")
    return lambda: getattr(stream, "reads", None)
