"""A URL as a message may show it: every password it carries replaced by ``***``.

A store URL carries its password in the user part (``postgresql://ca:PASSWORD@host/db``) or in
the query string: libpq and asyncpg read ``?password=``, and libpq's ``sslpassword`` (the client
key's passphrase) and ``oauth_client_secret`` are secrets as well. Every error, log line and
banner that names a store URL shows it through :func:`hidden`; the drivers get the URL as written.
In the spec layer, with no import but the standard library, so that the settings' and
``store.url``'s own errors use it too.
"""

from __future__ import annotations

from urllib.parse import unquote

MASK = "***"
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret"})
"""The connection parameters of libpq (and asyncpg) whose value is a secret."""


def hidden(url: str) -> str:
    """``url`` with the password of its user part and the value of each query parameter of
    :data:`SECRET_PARAMETERS` replaced by ``***``; the rest as written (no re-encoding).

    Split by hand, as libpq reads a URL, rather than with ``urlsplit``: that refuses some malformed
    URLs (an unclosed ``[``) and ends the user part at a ``?`` or ``#`` that libpq keeps in the
    password, and the URL of an error message is often one the user got wrong. When in doubt,
    more is hidden: the user part runs to the last ``@`` before the first ``/``, or to the last
    ``@`` of all when a ``:`` comes before it (a password holding a ``/``); a parameter's value
    to the next ``&`` (a ``#`` is part of it).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    slash = rest.find("/")
    end = rest.rfind("@", 0, len(rest) if slash < 0 else slash)
    last = rest.rfind("@")
    if last > end and ":" in rest[:last]:
        end = last  # a password holding a "/" (not percent-encoded): its "@" lies past it
    userinfo, at, after = (rest[:end], "@", rest[end + 1 :]) if end >= 0 else ("", "", rest)
    if ":" in userinfo:
        userinfo = f"{userinfo.split(':', 1)[0]}:{MASK}"
    location, question, query = after.partition("?")
    if question:
        query = "&".join(_hidden_parameter(parameter) for parameter in query.split("&"))
    return f"{scheme}://{userinfo}{at}{location}{question}{query}"


def _hidden_parameter(parameter: str) -> str:
    """``name=***`` for a secret parameter (its name in any case, percent-encoded or not)."""
    name, equals, _ = parameter.partition("=")
    return f"{name}={MASK}" if equals and unquote(name).strip().lower() in SECRET_PARAMETERS else parameter
