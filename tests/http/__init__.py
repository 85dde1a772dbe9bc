"""The HTTP wing's own tests: lpxtop/http against real loopback servers, and held to h11, httpx-sse and zlib."""
