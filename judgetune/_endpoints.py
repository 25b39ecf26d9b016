"""Where a server LM may be reached, and where the user's key may go.

Two rules (docs/reliability.md, "Trust: keys and endpoints"):

- **No address a request must never reach.** An ``api_base`` that is not ``http(s)``, names a link-local
  address (169.254.0.0/16, fe80::/10, also as an IPv4-mapped IPv6 address or a name resolving to one) or a
  cloud metadata host is refused wherever it comes from.
- **A key goes only where the user sent it.** ``$OPENAI_API_KEY`` is sent to OpenAI's own endpoint, to an
  endpoint the user named (``--api-base``, ``load_lm(api_base=...)``, ``$OPENAI_BASE_URL``) and to one listed
  in ``$JUDGETUNE_TRUSTED_ENDPOINTS``. An endpoint read from a file someone else may have written (a
  judge.json's ``lm.api_base``, a shared study's spec) gets requests without the key.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from urllib.parse import urlsplit

from judgetune.errors import JudgetuneError

__all__ = ["OPENAI_ENDPOINT", "TRUST_ENV", "EndpointError", "check_endpoint", "check_resolved", "is_trusted",
           "same_endpoint", "untrusted_hint"]

OPENAI_ENDPOINT = "https://api.openai.com/v1"
TRUST_ENV = "JUDGETUNE_TRUSTED_ENDPOINTS"  # endpoints (api bases) the user trusts with the key, comma-separated
BASE_URL_ENVS = ("OPENAI_BASE_URL", "OPENAI_API_BASE")  # the OpenAI SDK's: an endpoint the user named
# cloud metadata services (the key, the machine's own credentials): never an LM endpoint
METADATA_HOSTS = {"metadata", "metadata.google.internal", "metadata.goog", "metadata.azure.internal",
                  "instance-data", "instance-data.ec2.internal", "169.254.169.254", "fd00:ec2::254", "100.100.100.200",
                  "169.254.170.2"}


class EndpointError(JudgetuneError, ValueError):
    """An ``api_base`` that no request may go to (a scheme other than http(s), link-local, metadata)."""


def _forbidden_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_link_local or (mapped is not None and mapped.is_link_local) or str(ip) in METADATA_HOSTS or (
        mapped is not None and str(mapped) in METADATA_HOSTS)


def check_endpoint(api_base: str, what: str = "api base", role: str = "an LM server") -> None:
    """Refuse an ``api_base`` that is not ``http(s)://HOST...``, or names a link-local address or a metadata host.
    ``what`` names the URL in the message (``download URL``), ``role`` what such an address never is.

    Raises:
        EndpointError: naming the address and why.
    """
    try:
        parts = urlsplit(api_base)
        _ = parts.port  # read, to refuse a port that is no number or out of range
    except ValueError as err:  # an unclosed [IPv6 bracket, a port such as 'abc' or 99999
        raise EndpointError(f"{what} {api_base!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1, found "
                            f"a malformed one ({err})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"{what} {api_base!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
    host = parts.hostname.rstrip(".").lower()
    if host in METADATA_HOSTS or _forbidden_address(host):
        raise EndpointError(f"{what} {api_base!r}: a link-local or cloud metadata address is never {role} "
                            "(it would hand out the machine's credentials); name the server's own address")


def check_resolved(api_base: str, what: str = "api base", role: str = "an LM server") -> None:
    """:func:`check_endpoint` on every address the host name resolves to (``2852039166``, a name pointing at
    169.254.169.254); a name that does not resolve is left to the connection to report.

    Raises:
        EndpointError: an address is link-local or a metadata host.
    """
    parts = urlsplit(api_base)
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return
    for *_, sockaddr in infos:
        if _forbidden_address(str(sockaddr[0])):
            raise EndpointError(f"{what} {api_base!r}: {parts.hostname} resolves to {sockaddr[0]}, a link-local or "
                                f"cloud metadata address, never {role}")


def check_proxy(api_base: str) -> None:
    """The proxy the environment sets for ``api_base``, or any URL (``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` unless
    ``NO_PROXY`` exempts it; httpx reads them) checked like an endpoint: a proxy at a link-local or metadata
    address would receive every request, keys included, so it is refused.

    Raises:
        EndpointError: naming the variable's proxy and why.
    """
    import urllib.request

    parts = urlsplit(api_base)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return
    try:
        check_endpoint(proxy if "://" in proxy else f"http://{proxy}", "proxy", "a proxy to use")
        check_resolved(proxy if "://" in proxy else f"http://{proxy}", "proxy", "a proxy to use")
    except EndpointError as err:
        raise EndpointError(f"the proxy the environment sets for {api_base} ({proxy}, from ${parts.scheme.upper()}_PROXY "
                            f"or $ALL_PROXY) is refused: {err}") from None


def _normal(api_base: str) -> str:
    parts = urlsplit(api_base.strip())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


def same_endpoint(a: str, b: str) -> bool:
    """Whether two api bases name one endpoint (scheme, host and path alike; case of the host, a default port
    and a trailing slash aside)."""
    try:
        return _normal(a) == _normal(b)
    except ValueError:  # a bad port
        return False


def is_trusted(api_base: str | None) -> bool:
    """Whether the user's key may go to ``api_base`` though the user did not name it here: OpenAI's endpoint
    (None), the endpoint of ``$OPENAI_BASE_URL``, or one listed in ``$JUDGETUNE_TRUSTED_ENDPOINTS``."""
    if api_base is None or same_endpoint(api_base, OPENAI_ENDPOINT):
        return True
    listed = [t for t in os.environ.get(TRUST_ENV, "").replace(",", " ").split() if t]
    listed += [os.environ[name] for name in BASE_URL_ENVS if os.environ.get(name)]
    return any(same_endpoint(api_base, t) for t in listed)


def untrusted_hint(api_base: str, where: str) -> str:
    """One sentence on why the key was not sent to ``api_base`` (read from ``where``) and how to send it."""
    return (f"{where} names the endpoint {api_base}, which you have not named or trusted: the key is not sent there. "
            f"To send it, pass --api-base {api_base} (judgetune.load(..., api_base=...)) or add it to "
            f"${TRUST_ENV}")
