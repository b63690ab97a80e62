"""The two error families: terminal (fail now, a person must act) and transient (a retry
may succeed). Each names what it is about, so the message alone is actionable."""


class ArchiveError(Exception):
    """Base of every error kafka-archive raises on purpose."""


class TerminalError(ArchiveError):
    """Retrying will not help: bad config, a malformed token, lost data, a lost race."""


class TransientError(ArchiveError):
    """Worth a retry: an unreachable broker or S3 server, throttling, a reset connection."""


class VersionConflict(TerminalError):
    """A compare-and-swap lost: the object changed since it was read (or exists when it was
    to be created), and nothing was written. Terminal for the writer as it stands: what it
    meant to write was computed from a state that is gone (a token another run advanced),
    so retrying the same write cannot be right. A caller that can compute its write again
    from a fresh read (the catalog's append, the audit's checkpoint) does so itself."""

    def __init__(self, url: str, expected: str | None, found: str | None, message: str = ""):
        super().__init__(message or f"{url} changed under this writer: expected version "
                         f"{expected or '<absent>'}, found {found or '<absent>'}; nothing written")
        self.url, self.expected, self.found = url, expected, found


class MissingObject(TerminalError):
    """Nothing is stored at the URL (an S3 key or a local file)."""


class ConfigError(TerminalError):
    """The config file is missing, unparseable or has a bad value; names file and key."""
