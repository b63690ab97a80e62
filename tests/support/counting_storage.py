"""A local Storage that counts the objects it reads (whole, streamed or with a version):
what the audit's and the catalog's cost claims are checked and benchmarked with."""

from kafka_archive.storage import Storage


class CountingStorage(Storage):
    reads = 0

    def get_bytes(self, url):
        self.reads += 1
        return super().get_bytes(url)

    def get_versioned(self, url):
        self.reads += 1
        return super().get_versioned(url)

    def open(self, url):
        self.reads += 1
        return super().open(url)
