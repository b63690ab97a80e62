"""The two error families: terminal (fail now, a person must act) and transient (a retry
may succeed). Each names what it is about, so the message alone is actionable."""


class ArchiveError(Exception):
    """Base of every error kafka-archive raises on purpose."""


class TerminalError(ArchiveError):
    """Retrying will not help: bad config, a malformed token, lost data."""


class TransientError(ArchiveError):
    """Worth a retry: an unreachable broker or S3 server, a lost race."""


class ConfigError(TerminalError):
    """The config file is missing, unparseable or has a bad value; names file and key."""
