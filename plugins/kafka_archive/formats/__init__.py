"""File formats the archiver writes, implemented in pure Python so the archiver needs no JVM."""
