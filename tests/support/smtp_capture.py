"""An SMTP server that accepts every message and keeps each one as a file.

    python tests/support/smtp_capture.py --port 12525 --maildir DIR

Each message is written to DIR/<arrival ns>-<n>.eml, atomically (temp file, then rename),
so a reader never sees half a message. Tests read these files to check what was mailed.
Binds to 127.0.0.1 only.
"""

import argparse
import asyncio
import itertools
import os
import signal
import time
from pathlib import Path

from aiosmtpd.controller import Controller


class CaptureToFiles:
    def __init__(self, maildir: Path):
        self.maildir = maildir
        self.counter = itertools.count()

    async def handle_DATA(self, server, session, envelope):
        name = f"{time.time_ns()}-{next(self.counter)}"
        tmp = self.maildir / f".{name}.tmp"
        tmp.write_bytes(envelope.original_content or envelope.content)
        os.replace(tmp, self.maildir / f"{name}.eml")
        return "250 Message accepted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--maildir", type=Path, required=True)
    args = parser.parse_args()
    args.maildir.mkdir(parents=True, exist_ok=True)
    controller = Controller(CaptureToFiles(args.maildir), hostname="127.0.0.1", port=args.port)
    controller.start()
    print(f"capturing mail on 127.0.0.1:{args.port} into {args.maildir}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.run_until_complete(stop.wait())
    controller.stop()


if __name__ == "__main__":
    main()
