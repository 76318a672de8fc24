"""pymongo errors translated at the plugin boundary into the runtime's error classes."""

from __future__ import annotations

from pymongo import errors as px

from cdc.contracts.errors import SourceFatal, SourceUnavailable

HISTORY_LOST = 286  # ChangeStreamHistoryLost: the resume point has left the oplog
FATAL_STREAM = 280  # ChangeStreamFatalError: the stream cannot resume from its token
INVALID_TOKEN = 260  # InvalidResumeToken
FAILED_TO_PARSE = 9
STANDALONE = 40573  # "The $changeStream stage is only supported on replica sets"
_AUTH = {13, 18}  # Unauthorized, AuthenticationFailed
_TRANSIENT_LABELS = ("ResumableChangeStreamError", "RetryableWriteError")


class HistoryLost(SourceFatal):
    """The stored resume point cannot be resumed from (it left the oplog, or is unusable)."""


def cannot_resume(exc: px.OperationFailure) -> bool:
    """The server refused to resume from the given token or time (not a passing failure).

    mongo-java-server keeps its oplog forever and answers an unparsable token with an error
    without a code ("For input string ..."); that is what tests use to force this path there.
    """
    if exc.code in (HISTORY_LOST, FATAL_STREAM, INVALID_TOKEN, FAILED_TO_PARSE):
        return True
    details = exc.details or {}
    if details.get("codeName") == "ChangeStreamHistoryLost":
        return True
    return exc.code is None and "For input string" in str(exc)


def standalone(exc: px.OperationFailure) -> bool:
    return exc.code == STANDALONE or "only supported on replica sets" in str(exc)


def standalone_error(where: str) -> SourceFatal:
    return SourceFatal(
        f"MongoDB at {where} is a standalone server: change streams need a replica set (or a "
        "sharded cluster). Start mongod with --replSet NAME and run rs.initiate() once; a "
        "single-member replica set is enough."
    )


def translate(exc: px.PyMongoError, where: str, doing: str) -> Exception:
    """The runtime's error for a driver error raised while ``doing``."""
    if isinstance(exc, px.ConfigurationError):
        return SourceFatal(f"MongoDB at {where}: invalid connection settings: {exc}")
    if isinstance(exc, px.ConnectionFailure):  # also ServerSelectionTimeoutError, AutoReconnect
        return SourceUnavailable(f"MongoDB at {where} is unreachable while {doing}: {exc}")
    if isinstance(exc, px.OperationFailure):
        if exc.code in _AUTH:
            return SourceFatal(f"MongoDB at {where} refused access while {doing}: {exc}")
        if standalone(exc):
            return standalone_error(where)
        if any(exc.has_error_label(label) for label in _TRANSIENT_LABELS):
            return SourceUnavailable(f"MongoDB at {where} failed for now while {doing}: {exc}")
    return SourceFatal(f"MongoDB at {where} failed while {doing}: {exc}")
